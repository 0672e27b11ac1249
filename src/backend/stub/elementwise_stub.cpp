// Built when the CUDA backend is off: the functions of backend/cuda/elementwise_ops.h throw
// Unsupported (no CUDA tensor can exist in such a build, so the ops/ wrappers never get here
// unless something is badly wrong).
#include "backend/cuda/elementwise_ops.h"

#include "core/error.h"

namespace zt::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  ZT_THROW_UNSUPPORTED(what, ": this build has no CUDA backend (rebuild with -DZT_WITH_CUDA=ON "
                             "or `cmake --preset cuda`, or use --device cpu)");
}

}  // namespace

void add(const Tensor&, const Tensor&, const Tensor&) { no_cuda("cuda::add"); }
void add_inplace(const Tensor&, const Tensor&) { no_cuda("cuda::add_inplace"); }
void scale_inplace(const Tensor&, float) { no_cuda("cuda::scale_inplace"); }
double sum_of_squares(const Tensor&) { no_cuda("cuda::sum_of_squares"); }
void sum_of_squares_accumulate(const Tensor&, double*) { no_cuda("cuda::sum_of_squares_accumulate"); }
bool all_finite(const Tensor&) { no_cuda("cuda::all_finite"); }

}  // namespace zt::cuda
