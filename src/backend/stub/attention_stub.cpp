// Built when the CUDA backend is off: the functions of backend/cuda/attention_ops.h, each
// throwing Unsupported (no CUDA tensor can exist in this build, so only a direct call gets
// here).
#include "backend/cuda/attention_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void attention_forward(const Tensor&, const Tensor&, const Tensor&, int, int, float) {
  no_cuda("cuda::attention_forward");
}
void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int, int,
                        float) {
  no_cuda("cuda::attention_backward");
}

void attention_forward_fma(const Tensor&, const Tensor&, const Tensor&, int, int, float) {
  no_cuda("cuda::attention_forward_fma");
}
void attention_backward_fma(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int, int,
                            float) {
  no_cuda("cuda::attention_backward_fma");
}

}  // namespace zt::cuda
