// Built when the CUDA backend is off: the functions of backend/cuda/rope_ops.h, each
// throwing Unsupported (no CUDA tensor can exist in this build, so only a direct call gets
// here).
#include "backend/cuda/rope_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void rope_forward_inplace(const Tensor&, int, int, const Tensor&, const Tensor&, int64_t) {
  no_cuda("cuda::rope_forward_inplace");
}
void rope_backward_inplace(const Tensor&, int, int, const Tensor&, const Tensor&, int64_t) {
  no_cuda("cuda::rope_backward_inplace");
}

}  // namespace zt::cuda
