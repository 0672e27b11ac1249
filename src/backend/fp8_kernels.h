// The FP8 conversion and amax kernels of both backends (backend/cpu/fp8.cpp,
// backend/cuda/fp8.cu), with the contract of ops/fp8.h; tensors are validated by the ops/
// wrapper (contiguous, equal element counts, dtypes and devices as the contract says).
#pragma once
#include "backend/kernel_list.h"
#include "core/error.h"
#include "core/tensor.h"

#define ZT_FP8_KERNELS(K)                                                                                   \
  K(void, fp8_quantize, (const Tensor& out, const Tensor& inp, const Tensor& scale, Saturation saturation)) \
  K(void, fp8_dequantize, (const Tensor& out, const Tensor& inp, const Tensor& scale))                      \
  K(void, amax, (const Tensor& out, const Tensor& inp))

namespace zt {
// Calls fn(Q{}) with Q the C++ type of an fp8 dtype (f8e4m3, f8e5m2): both backends'
// kernels dispatch with it.
template <class Fn>
void dispatch_fp8(DType dtype, Fn&& fn) {
  if (dtype == DType::F8E4M3) return fn(f8e4m3{});
  ZT_CHECK(dtype == DType::F8E5M2, "expected an fp8 dtype, got ", dtype_name(dtype));
  fn(f8e5m2{});
}
}  // namespace zt

namespace zt::cpu {
ZT_FP8_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_FP8_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
