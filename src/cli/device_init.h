// Starting the backend of a subcommand's --device before it loads anything.
#pragma once
#include <string>

#include "core/device.h"

namespace zt::cli {

// CPU: nothing. CUDA: initialises the device, or throws BadInput (exit 2) naming `command`
// and the fix when no GPU is visible or the build has no CUDA backend.
void init_device(const std::string& command, Device device);

}  // namespace zt::cli
