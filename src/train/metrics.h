// What a training log line shows: throughput, model FLOPs utilisation against a peak
// table, and memory; plus the JSONL metrics file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace zt::train {

// The MFU denominator: peak dense FLOP/s for the dtype the step computes in, and where
// the number comes from, for the log's first lines.
struct PeakFlops {
  double flops = 0;    // 0: unknown (an unlisted GPU): MFU is not reported
  std::string source;  // "NVIDIA H200, dense bf16 table", "CPU: 2 cores x AVX2 FMA x 2.5 GHz", ...
  bool known() const { return flops > 0; }
  // "989 TFLOPS (NVIDIA H200, dense bf16 table)", or why there is no MFU.
  std::string describe() const;
};
enum class ComputeDevice { CPU, GPU };
enum class PeakPrecision { F32, Sixteen };  // bf16 and fp16 have the same dense peaks
// ZT_PEAK_TFLOPS overrides everything. A GPU: its name (cuda::device_info().name) looked
// up in a table of common parts (case-insensitive substring; the bf16/fp16 tensor-core
// dense peak, or the fp32 one), unknown = 0 (zerotrain train then measures one:
// train/gemm_peak.h). The CPU: cores x FMA width (AVX2 or
// AVX-512) x 2 FMA units x clock from /proc/cpuinfo.
PeakFlops peak_flops(ComputeDevice device, const std::string& gpu_name, PeakPrecision precision);
// "cpu: <model name>, N cores" for the log.
std::string cpu_description();

struct MemoryUsage {
  int64_t rss_bytes = 0;       // resident now
  int64_t peak_rss_bytes = 0;  // high-water mark
};
MemoryUsage host_memory();

std::string human_bytes(double bytes);
// "42s", "3m07s", "2h05m", "3d04h" (whole seconds, rounded down; negative as 0s).
std::string human_duration(double seconds);

// Whether metrics still reach their file.
enum class MetricsState { Writing, Failed };

// Appends one JSON object per line; flushed after each record so a crash loses nothing.
// A write that fails (a full disk, a quota, an I/O error) is a warning, once, naming the
// file, the error and the step from which metrics are lost; training goes on (metrics are
// not worth a run) and the file is not written again (no torn lines after a partial write).
class MetricsFile {
 public:
  MetricsFile() = default;
  explicit MetricsFile(const std::string& path, bool append);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  void write(const nlohmann::json& record);
  MetricsState state() const { return state_; }

 private:
  void fail(const nlohmann::json& record, int err);
  std::string path_;
  std::FILE* file_ = nullptr;
  MetricsState state_ = MetricsState::Writing;
};

}  // namespace zt::train
