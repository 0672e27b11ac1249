// Built when the CUDA backend is off: the functions of backend/cuda/linear_ops.h throw
// Unsupported (ops/linear.cpp only calls them for tensors on a CUDA device, which a CPU-only
// build cannot allocate).
#include "backend/cuda/linear_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void linear_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, WeightLayout) {
  no_cuda("cuda::linear_forward");
}

void linear_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     WeightLayout) {
  no_cuda("cuda::linear_backward");
}

}  // namespace zt::cuda
