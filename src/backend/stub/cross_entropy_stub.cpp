// Built when the CUDA backend is off: the functions of backend/cuda/cross_entropy_ops.h throw
// Unsupported (ops/cross_entropy.cpp only calls them for tensors on a CUDA device, which a
// CPU-only build cannot allocate).
#include "backend/cuda/cross_entropy_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

CrossEntropySums lm_head_cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&, int64_t, int,
                                               const Tensor&, int64_t) {
  no_cuda("cuda::lm_head_cross_entropy_forward");
}

CrossEntropySums lm_head_cross_entropy_forward_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, int64_t, int, float, int64_t) {
  no_cuda("cuda::lm_head_cross_entropy_forward_backward");
}

}  // namespace zt::cuda
