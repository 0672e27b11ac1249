// Built when the CUDA backend is off: the functions of backend/cuda/optimizer_ops.h throw
// Unsupported.
#include "backend/cuda/optimizer_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWHyper&) {
  no_cuda("cuda::adamw_step");
}
void sgd_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const SgdHyper&) {
  no_cuda("cuda::sgd_step");
}
void lion_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const LionHyper&) {
  no_cuda("cuda::lion_step");
}

void adamw_step_segments(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamWHyper&,
                         const OptimizerSegments&) {
  no_cuda("cuda::adamw_step_segments");
}
void sgd_step_segments(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const SgdHyper&,
                       const OptimizerSegments&) {
  no_cuda("cuda::sgd_step_segments");
}
void lion_step_segments(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const LionHyper&,
                        const OptimizerSegments&) {
  no_cuda("cuda::lion_step_segments");
}

}  // namespace zt::cuda
