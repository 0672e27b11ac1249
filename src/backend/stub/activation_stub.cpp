// Built when the CUDA backend is off: the functions of backend/cuda/activation_ops.h throw
// Unsupported.
#include "backend/cuda/activation_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void gelu_forward(const Tensor&, const Tensor&) { no_cuda("cuda::gelu_forward"); }
void gelu_backward(const Tensor&, const Tensor&, const Tensor&) { no_cuda("cuda::gelu_backward"); }
void silu_forward(const Tensor&, const Tensor&) { no_cuda("cuda::silu_forward"); }
void silu_backward(const Tensor&, const Tensor&, const Tensor&) { no_cuda("cuda::silu_backward"); }
void swiglu_forward(const Tensor&, const Tensor&, const Tensor&) { no_cuda("cuda::swiglu_forward"); }
void swiglu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("cuda::swiglu_backward");
}

}  // namespace zt::cuda
