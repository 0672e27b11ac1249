// What every stand-in of a CUDA function says in a build without the CUDA backend.
#pragma once
#include "core/error.h"

namespace zt::cuda {

[[noreturn]] inline void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what,
                       ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                       "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace zt::cuda
