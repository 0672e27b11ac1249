#include "train/metrics.h"
#include "core/strings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "core/env_vars.h"
#include "core/error.h"
#include "core/log.h"
#include "io/output_file.h"

namespace zt::train {

namespace {

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

// A resumed run appends to metrics.jsonl. When the last run's last record was cut off (a
// full disk, a kill in the middle of a write), appending would glue the next record to
// it, and a bad line in the middle is an error for `zerotrain plot`: the torn bytes after
// the last end of line are cut off first, with a warning.
void drop_torn_record(int fd, const std::string& path) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
  const off_t size = st.st_size;
  // The stream is write-only (append): its tail is read through a read-only descriptor.
  const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (in < 0) return;
  off_t keep = -1;  // the bytes up to and with the last '\n' (-1: the file ends with one)
  char buf[4096];
  char last = 0;
  if (::pread(in, &last, 1, size - 1) == 1 && last != '\n') {
    keep = 0;
    for (off_t end = size; end > 0 && keep == 0;) {
      const off_t begin = std::max<off_t>(0, end - static_cast<off_t>(sizeof buf));
      if (::pread(in, buf, static_cast<size_t>(end - begin), begin) != end - begin) {
        keep = -1;  // unreadable: left as it is
        break;
      }
      for (off_t i = end - begin - 1; i >= 0; --i)
        if (buf[i] == '\n') {
          keep = begin + i + 1;
          break;
        }
      end = begin;
    }
  }
  ::close(in);
  if (keep < 0) return;
  if (::ftruncate(fd, keep) != 0) {
    ZT_WARN("metrics file '", path, "' ends with a torn record that could not be cut off (", std::strerror(errno),
            "); `zerotrain plot` refuses the file until that line is removed");
    return;
  }
  ZT_WARN("metrics file '", path, "' ended with a torn record (", size - keep,
          " bytes after the last end of line: a full disk or a killed run); cut off before appending");
}

}  // namespace

std::string PeakFlops::describe() const {
  if (!known()) return "no MFU: " + source;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g TFLOPS", flops / 1e12);
  return str(buf, " (", source, ")");
}

PeakFlops peak_flops(ComputeDevice device, const std::string& gpu_name, PeakPrecision precision) {
  // "measure" is trainer.cpp's (a timed GEMM); anything else not a positive number is an
  // error naming the variable, not a silent fall back to the peak table.
  if (const std::optional<double> tflops = env_positive_number(EnvVar::PeakTflops, "measure"))
    return {*tflops * 1e12, "ZT_PEAK_TFLOPS"};
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
  if (append) drop_torn_record(::fileno(file_), path);
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
