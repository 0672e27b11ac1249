// What a training log line shows: throughput, model FLOPs utilisation against a peak
// table, and memory; plus the JSONL metrics file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace zt::train {

// Peak dense FLOP/s for the dtype the step computes in, for the MFU denominator.
// GPUs from a table of common parts (matched on the device name; bf16/fp16 tensor-core
// peak, dense); the CPU from cores x FMA width x clock. ZT_PEAK_TFLOPS overrides.
double peak_flops(const std::string& device_name, bool low_precision);
// "cpu: <model name>, N cores" for the log.
std::string cpu_description();

struct MemoryUsage {
  int64_t rss_bytes = 0;       // resident now
  int64_t peak_rss_bytes = 0;  // high-water mark
};
MemoryUsage host_memory();

std::string human_bytes(double bytes);

// Appends one JSON object per line; flushed after each record so a crash loses nothing.
class MetricsFile {
 public:
  MetricsFile() = default;
  explicit MetricsFile(const std::string& path, bool append);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace zt::train
