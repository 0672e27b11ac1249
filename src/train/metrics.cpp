#include "train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace zt::train {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Reads "key : value" from /proc/cpuinfo (first match).
std::string cpuinfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return {};
}
}  // namespace

double peak_flops(const std::string& device_name, bool low_precision) {
  if (const char* v = std::getenv("ZT_PEAK_TFLOPS")) return std::atof(v) * 1e12;
  const std::string n = lower(device_name);
  struct Entry {
    const char* match;
    double bf16_tflops;
    double fp32_tflops;
  };
  // Dense tensor-core peaks (no sparsity), SXM parts unless named.
  static const Entry table[] = {
      {"h200", 989.0, 67.0},  {"h100 pcie", 756.0, 51.0}, {"h100", 989.0, 67.0}, {"gh200", 989.0, 67.0},
      {"b200", 2250.0, 80.0}, {"a100", 312.0, 19.5},      {"a10g", 125.0, 31.2}, {"a10", 125.0, 31.2},
      {"l40s", 362.0, 91.6},  {"l4", 121.0, 30.3},        {"v100", 125.0, 15.7}, {"rtx 4090", 165.0, 82.6},
      {"rtx 3090", 71.0, 35.6}, {"t4", 65.0, 8.1},
  };
  for (const auto& e : table)
    if (n.find(e.match) != std::string::npos) return (low_precision ? e.bf16_tflops : e.fp32_tflops) * 1e12;
  // CPU: cores x 2 FMA units x 8 f32 lanes (AVX2) x 2 FLOPs x clock.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  double mhz = std::atof(cpuinfo("cpu MHz").c_str());
  if (mhz <= 0) mhz = 2500;
  const bool avx512 = cpuinfo("flags").find("avx512f") != std::string::npos;
  return cores * 2.0 * (avx512 ? 16 : 8) * 2.0 * mhz * 1e6;
}

std::string cpu_description() {
  std::string model = cpuinfo("model name");
  if (model.empty()) model = "unknown CPU";
  return str(model, ", ", std::thread::hardware_concurrency(), " cores");
}

MemoryUsage host_memory() {
  MemoryUsage m;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string key;
    int64_t kb = 0;
    ss >> key >> kb;
    if (key == "VmRSS:") m.rss_bytes = kb * 1024;
    if (key == "VmHWM:") m.peak_rss_bytes = kb * 1024;
  }
  return m;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, i == 0 ? "%.0f %s" : "%.1f %s", b, units[i]);
  return buf;
}

MetricsFile::MetricsFile(const std::string& path, bool append) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_) ZT_THROW_IO("cannot open metrics file '", path, "' for writing");
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

void MetricsFile::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace zt::train
