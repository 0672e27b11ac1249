// CUDA kernels for the pointwise helpers of ops/elementwise.h (elementwise.cu). Same
// meaning, shapes and accumulation rule as the ops/ functions, which have validated the
// tensors (contiguous, floating dtypes, equal sizes, all on one CUDA device):
//   add (=, one dtype; out may alias a or b), add_inplace (+=, computed in f32 and rounded
//   once to acc's dtype; acc and x may differ in dtype), scale_inplace (in place).
// sum_of_squares and all_finite return host values: they synchronise the compute stream.
// Every kernel is asynchronous on the compute stream otherwise (sum_of_squares_accumulate
// included: it adds into a device double).
#pragma once
#include "core/tensor.h"

namespace zt::cuda {

void add(const Tensor& out, const Tensor& a, const Tensor& b);
void add_inplace(const Tensor& acc, const Tensor& x);
void scale_inplace(const Tensor& x, float alpha);
// Sum of x^2 in double (each element widened to double before squaring, as the CPU does);
// partial sums are combined in a fixed order, so the result is the same on every call.
double sum_of_squares(const Tensor& x);
// *acc += sum_of_squares(x), on the device: acc points to one double in device memory. The
// value added is sum_of_squares(x)'s bit for bit, and the addition is one IEEE double add
// queued after the earlier work on the stream, so a chain of calls gives the host's
// `acc += sum_of_squares(x)` chain exactly.
void sum_of_squares_accumulate(const Tensor& x, double* acc);
bool all_finite(const Tensor& x);

}  // namespace zt::cuda
