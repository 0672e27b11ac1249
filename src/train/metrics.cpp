#include "train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/env_vars.h"
#include "core/error.h"
#include "core/log.h"
#include "io/output_file.h"

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

std::string PeakFlops::describe() const {
  if (!known()) return "no MFU: " + source;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g TFLOPS", flops / 1e12);
  return str(buf, " (", source, ")");
}

PeakFlops peak_flops(ComputeDevice device, const std::string& gpu_name, PeakPrecision precision) {
  if (const char* v = env_value(EnvVar::PeakTflops)) {
    const double tflops = std::atof(v);
    if (tflops > 0) return {tflops * 1e12, "ZT_PEAK_TFLOPS"};
  }
  const bool sixteen = precision == PeakPrecision::Sixteen;
  if (device == ComputeDevice::GPU) {
    struct Entry {
      const char* match;
      double bf16_tflops;
      double fp32_tflops;
    };
    // Dense tensor-core peaks (no sparsity), SXM parts unless named; first match wins,
    // so the more specific names come first.
    static const Entry table[] = {
        {"gh200", 989.0, 67.0},   {"h200", 989.0, 67.0}, {"h100 pcie", 756.0, 51.0}, {"h100", 989.0, 67.0},
        {"b200", 2250.0, 80.0},   {"a100", 312.0, 19.5}, {"a10g", 125.0, 31.2},      {"a10", 125.0, 31.2},
        {"l40s", 362.0, 91.6},    {"l4", 121.0, 30.3},   {"v100", 125.0, 15.7},      {"rtx 4090", 165.0, 82.6},
        {"rtx 3090", 71.0, 35.6}, {"t4", 65.0, 8.1},
    };
    const std::string n = lower(gpu_name);
    for (const auto& e : table)
      if (n.find(e.match) != std::string::npos)
        return {(sixteen ? e.bf16_tflops : e.fp32_tflops) * 1e12,
                str(gpu_name, sixteen ? ", dense bf16/fp16 table" : ", fp32 table")};
    return {0, str("GPU '", gpu_name, "' is not in the peak table; set ZT_PEAK_TFLOPS=<dense TFLOPS>, or =measure")};
  }
  // CPU: cores x 2 FMA units x f32 lanes (8 AVX2, 16 AVX-512) x 2 FLOPs x clock.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  double mhz = std::atof(cpuinfo("cpu MHz").c_str());
  if (mhz <= 0) mhz = 2500;
  const bool avx512 = cpuinfo("flags").find("avx512f") != std::string::npos;
  char ghz[16];
  std::snprintf(ghz, sizeof ghz, "%.2g", mhz / 1000);
  return {cores * 2.0 * (avx512 ? 16 : 8) * 2.0 * mhz * 1e6,
          str("CPU: ", cores, " cores x ", avx512 ? "AVX-512" : "AVX2", " FMA x ", ghz, " GHz")};
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

std::string human_duration(double seconds) {
  const long long s = seconds > 0 ? static_cast<long long>(seconds) : 0;
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else if (s < 86400)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  else
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
  return buf;
}

MetricsFile::MetricsFile(const std::string& path, bool append) : path_(path) {
  file_ = io::open_file_for_write(path, append ? io::WriteOpen::Append : io::WriteOpen::Truncate,
                                  "give the run another output_dir");
}

MetricsFile::~MetricsFile() {
  // Every record was flushed, so a close error here has been reported by write already.
  if (file_) std::fclose(file_);
}

void MetricsFile::fail(const nlohmann::json& record, int err) {
  state_ = MetricsState::Failed;
  std::fclose(file_);
  file_ = nullptr;
  const std::string from = record.contains("step") ? " from step " + record["step"].dump() : "";
  ZT_WARN("cannot write metrics file '", path_, "': ", std::strerror(err), "; metrics", from,
          " on are not recorded (training goes on; the log lines still show them): free space on its file system "
          "or give another output_dir");
}

void MetricsFile::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  errno = 0;
  const size_t n = std::fwrite(line.data(), 1, line.size(), file_);
  if (n != line.size() || std::fflush(file_) != 0) fail(record, errno != 0 ? errno : EIO);
}

}  // namespace zt::train
