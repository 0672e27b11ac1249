#include "core/device.h"

#include <cstdlib>

#include "core/error.h"

namespace zt {

std::string Device::name() const { return is_cpu() ? std::string("cpu") : str("cuda:", index); }

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    char* end = nullptr;
    long idx = std::strtol(text.c_str() + 5, &end, 10);
    if (end && *end == '\0' && idx >= 0 && text.size() > 5) return Device::cuda(static_cast<int>(idx));
  }
  ZT_THROW_INPUT("unknown device '", text, "': use cpu, cuda or cuda:N");
}

}  // namespace zt
