#include "core/memory_info.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/fail_point.h"

namespace zt {

std::optional<uint64_t> host_available_bytes() {
  if (const std::optional<uint64_t> pretended = simulated_host_memory()) return pretended;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream ss(line.substr(13));
    uint64_t kib = 0;
    if (ss >> kib) return kib * 1024;
  }
  return std::nullopt;
}

std::string bytes_str(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

void check_fits_host_memory(double bytes, const std::string& what, const std::string& fix) {
  const std::optional<uint64_t> avail = host_available_bytes();
  if (!avail || bytes <= static_cast<double>(*avail)) return;
  ZT_THROW_INPUT(what, " need ", bytes_str(bytes), " of host memory, but only ", bytes_str(static_cast<double>(*avail)),
                 " is available (MemAvailable, /proc/meminfo): ",
                 fix.empty() ? "check the model config (num_layers, hidden_size, vocab_size), use ZeRO stage 3 over "
                               "more ranks, or a machine with more memory"
                             : fix);
}

}  // namespace zt
