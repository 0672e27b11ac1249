// Small pointwise helpers: residual add, accumulate, scale, sum of squares.
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// out = a + b (same shapes; out may alias a or b).
void add(const Tensor& out, const Tensor& a, const Tensor& b);
// acc += x.
void add_inplace(const Tensor& acc, const Tensor& x);
// x *= alpha.
void scale_inplace(const Tensor& x, float alpha);
// Sum of x^2 over all elements, accumulated in double (for the global gradient norm).
double sum_of_squares(const Tensor& x);
// True when every element is finite (no inf or nan).
bool all_finite(const Tensor& x);

}  // namespace zt::ops
