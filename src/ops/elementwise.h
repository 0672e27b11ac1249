// Small pointwise helpers: residual add, accumulate, scale, sum of squares.
#pragma once
#include "core/allocator.h"
#include "core/device.h"
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

// The sum of squares of several tensors on one device, accumulated in double where they
// live and read back once: on CUDA, add() only queues kernels and value() is the single
// host synchronisation. value() equals, bit for bit, the host loop
//   double sum = 0; for each x added, in order: sum += sum_of_squares(x);
// Being a sum of squares of f32/bf16/f16 values (each at most ~1.2e77 in double), it is
// finite exactly when every element added is: value() also answers all_finite for them all.
class SumOfSquares {
 public:
  explicit SumOfSquares(Device device);
  // sum += sum_of_squares(x); x must be a contiguous float tensor on the device.
  void add(const Tensor& x);
  double value() const;
  Device device() const { return device_; }

 private:
  Device device_;
  double host_sum_ = 0.0;  // CPU
  Buffer device_sum_;      // CUDA: one double
};

}  // namespace zt::ops
