// FP8 conversions and amax (see ops/fp8.h): the checks, then the device's kernel.
#include "ops/fp8.h"

#include "backend/fp8_kernels.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {

void check_contiguous(const char* op, const Tensor& t) {
  ZT_CHECK(t.defined() && t.is_contiguous(), op, ": '", t.name(), "' must be a contiguous tensor, got ",
           shape_str(t.shape()));
}

void check_wide(const char* op, const Tensor& t) {
  ZT_CHECK(is_floating(t.dtype()), op, ": '", t.name(), "' must be f32, bf16 or f16, got ", dtype_name(t.dtype()));
  check_contiguous(op, t);
}

void check_narrow(const char* op, const Tensor& t) {
  ZT_CHECK(is_fp8(t.dtype()), op, ": '", t.name(), "' must be f8_e4m3 or f8_e5m2, got ", dtype_name(t.dtype()));
  check_contiguous(op, t);
}

void check_scalar(const char* op, const char* what, const Tensor& t) {
  ZT_CHECK(t.defined() && t.dtype() == DType::F32 && t.numel() == 1, op, ": the ", what,
           " must be one f32 element, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
}

void check_pair(const char* op, const Tensor& out, const Tensor& inp) {
  ZT_CHECK(out.numel() == inp.numel(), op, ": '", out.name(), "' has ", out.numel(), " elements, '", inp.name(), "' ",
           inp.numel());
}

}  // namespace

void fp8_quantize(const Tensor& out, const Tensor& inp, const Tensor& scale, Saturation saturation) {
  const char* op = "fp8_quantize";
  check_narrow(op, out);
  check_wide(op, inp);
  check_scalar(op, "scale", scale);
  check_pair(op, out, inp);
  const Device dev = common_device(op, {&out, &inp, &scale});
  ZT_RUN_KERNEL(op, dev, fp8_quantize(out, inp, scale, saturation));
}

void fp8_dequantize(const Tensor& out, const Tensor& inp, const Tensor& scale) {
  const char* op = "fp8_dequantize";
  check_wide(op, out);
  check_narrow(op, inp);
  check_scalar(op, "scale", scale);
  check_pair(op, out, inp);
  const Device dev = common_device(op, {&out, &inp, &scale});
  ZT_RUN_KERNEL(op, dev, fp8_dequantize(out, inp, scale));
}

void amax(const Tensor& out, const Tensor& inp) {
  const char* op = "amax";
  check_scalar(op, "output", out);
  check_wide(op, inp);
  const Device dev = common_device(op, {&out, &inp});
  ZT_RUN_KERNEL(op, dev, amax(out, inp));
}

}  // namespace zt::ops
