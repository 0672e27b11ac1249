// Tensor-level pointwise helpers (see ops/elementwise.h).
//
// Accumulation rule: add (=), add_inplace (+=, computed in f32, one rounding to acc's
// dtype), scale_inplace (in place). add_inplace, scale_inplace, sum_of_squares and
// all_finite take f32, bf16 or f16 (they run on parameter-gradient buffers); add_inplace
// allows acc and x of different floating dtypes. add needs one dtype for all three.
// On CUDA, sum_of_squares and all_finite synchronise the compute stream (host results);
// SumOfSquares accumulates on the device and synchronises once, in value().
#include "ops/elementwise.h"

#include "backend/elementwise_kernels.h"
#include "backend/cuda_api.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
void check_float_contiguous(const char* op, const Tensor& t) {
  ZT_CHECK(is_floating(t.dtype()), op, ": tensor '", t.name(), "' has dtype ", dtype_name(t.dtype()),
           ", expected f32, bf16 or f16");
  ZT_CHECK(t.is_contiguous(), op, ": tensor '", t.name(), "' must be contiguous");
}
}  // namespace

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  check_float_contiguous("add", out);
  check_float_contiguous("add", a);
  check_float_contiguous("add", b);
  ZT_CHECK(a.numel() == out.numel() && b.numel() == out.numel(), "add: sizes ", shape_str(out.shape()), ", ",
           shape_str(a.shape()), ", ", shape_str(b.shape()));
  ZT_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "add: dtypes differ");
  const Device dev = common_device("add", {&out, &a, &b});
  ZT_RUN_KERNEL("add", dev, add(out, a, b));
}

void add_inplace(const Tensor& acc, const Tensor& x) {
  check_float_contiguous("add_inplace", acc);
  check_float_contiguous("add_inplace", x);
  ZT_CHECK(acc.numel() == x.numel(), "add_inplace: sizes ", shape_str(acc.shape()), " and ", shape_str(x.shape()));
  const Device dev = common_device("add_inplace", {&acc, &x});
  ZT_RUN_KERNEL("add_inplace", dev, add_inplace(acc, x));
}

void scale_inplace(const Tensor& x, float alpha) {
  check_float_contiguous("scale_inplace", x);
  const Device dev = common_device("scale_inplace", {&x});
  ZT_RUN_KERNEL("scale_inplace", dev, scale_inplace(x, alpha));
}

double sum_of_squares(const Tensor& x) {
  check_float_contiguous("sum_of_squares", x);
  const Device dev = common_device("sum_of_squares", {&x});
  return ZT_RUN_KERNEL("sum_of_squares", dev, sum_of_squares(x));
}

bool all_finite(const Tensor& x) {
  check_float_contiguous("all_finite", x);
  const Device dev = common_device("all_finite", {&x});
  return ZT_RUN_KERNEL("all_finite", dev, all_finite(x));
}

SumOfSquares::SumOfSquares(Device device) : device_(device) {
  if (device_.is_cuda()) {
    device_sum_ = Buffer(sizeof(double), device_);
    device_sum_.zero();  // queued on the compute stream, before any add()
  } else if (!device_.is_cpu()) {
    no_kernel("SumOfSquares", device_);
  }
}

void SumOfSquares::add(const Tensor& x) {
  check_float_contiguous("SumOfSquares::add", x);
  ZT_CHECK(x.device() == device_, "SumOfSquares::add: tensor '", x.name(), "' is on ", x.device().name(),
           ", the sum on ", device_.name());
  if (device_.is_cuda()) {
    cuda::sum_of_squares_accumulate(x, static_cast<double*>(device_sum_.data()));
    return;
  }
  host_sum_ += cpu::sum_of_squares(x);
}

double SumOfSquares::value() const {
  if (!device_.is_cuda()) return host_sum_;
  double result = 0.0;
  cuda::copy_to_host(&result, device_sum_.data(), sizeof(double));  // waits for the queued adds
  return result;
}

}  // namespace zt::ops
