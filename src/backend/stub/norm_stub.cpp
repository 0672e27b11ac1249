// Built when the CUDA backend is off: the functions of backend/cuda/norm_ops.h, each
// throwing Unsupported (no CUDA tensor can exist in this build, so only a direct call gets
// here).
#include "backend/cuda/norm_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       float) {
  no_cuda("cuda::layernorm_forward");
}
void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, GradWrite) {
  no_cuda("cuda::layernorm_backward");
}
void rmsnorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float) {
  no_cuda("cuda::rmsnorm_forward");
}
void add_layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, float) {
  no_cuda("cuda::add_layernorm_forward");
}
void add_rmsnorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         float) {
  no_cuda("cuda::add_rmsnorm_forward");
}
void rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                      GradWrite) {
  no_cuda("cuda::rmsnorm_backward");
}

}  // namespace zt::cuda
