// Built when the CUDA backend is off: the functions of backend/cuda/embedding_ops.h, each
// throwing Unsupported (no CUDA tensor can exist in this build, so only a direct call gets
// here).
#include "backend/cuda/embedding_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

TokenCheck embedding_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("cuda::embedding_forward");
}
TokenCheck embedding_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("cuda::embedding_backward");
}

}  // namespace zt::cuda
