// Built when the CUDA backend is off: the functions of backend/cuda/dropout_ops.h throw
// Unsupported.
#include "backend/cuda/dropout_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void dropout_forward(const Tensor&, const Tensor&, float, const Philox&) { no_cuda("cuda::dropout_forward"); }
void dropout_backward(const Tensor&, const Tensor&, float, const Philox&) { no_cuda("cuda::dropout_backward"); }

}  // namespace zt::cuda
