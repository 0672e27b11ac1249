#include "cli/device_init.h"

#include "backend/cuda_api.h"
#include "core/error.h"

namespace zt::cli {

void init_device(const std::string& command, Device device) {
  if (!device.is_cuda()) return;
  if (!cuda::available())
    ZT_THROW_INPUT(command,
                   ": --device cuda, but no GPU is visible to this process, or this build has no CUDA "
                   "backend (`zerotrain report` says which): use --device cpu");
  cuda::init(device.index);
}

}  // namespace zt::cli
