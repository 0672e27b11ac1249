// Pointwise kernels of both backends, behind ops/elementwise.h: backend/cpu/elementwise.cpp
// and backend/cuda/elementwise.cu. Same meaning, shapes and accumulation rule as the ops/
// functions, which have validated the tensors (contiguous, floating dtypes, equal sizes, all
// on one device):
//   add (=, one dtype; out may alias a or b), add_inplace (+=, computed in f32 and rounded
//   once to acc's dtype; acc and x may differ in dtype), scale_inplace (in place).
// CUDA: sum_of_squares and all_finite return host values: they synchronise the compute
// stream. Every kernel is asynchronous on the compute stream otherwise
// (sum_of_squares_accumulate included: it adds into a device double).
#pragma once
#include "backend/kernel_list.h"
#include "core/tensor.h"

// sum_of_squares: in double (each element widened before squaring, as the CPU does), partial
// sums combined in a fixed order: the same result on every call.
#define ZT_ELEMENTWISE_KERNELS(K)                                     \
  K(void, add, (const Tensor& out, const Tensor& a, const Tensor& b)) \
  K(void, add_inplace, (const Tensor& acc, const Tensor& x))          \
  K(void, scale_inplace, (const Tensor& x, float alpha))              \
  K(double, sum_of_squares, (const Tensor& x))                        \
  K(bool, all_finite, (const Tensor& x))

// CUDA only: sum_of_squares_accumulate: *acc += sum_of_squares(x) on the device (acc points
// to one double in device memory), bit for bit that value, one IEEE double add queued after
// the earlier work on the stream: a chain of calls gives the host's chain exactly.
#define ZT_ELEMENTWISE_CUDA_ONLY_KERNELS(K) K(void, sum_of_squares_accumulate, (const Tensor& x, double* acc))

namespace zt::cpu {
ZT_ELEMENTWISE_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_ELEMENTWISE_KERNELS(ZT_DECLARE_KERNEL)
ZT_ELEMENTWISE_CUDA_ONLY_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
