// copy_on_device / convert_on_device (backend/cuda_api.h): device-to-device copies and
// dtype conversions on the compute stream, with the kernels of convert.cu.
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/convert.h"
#include "backend/cuda_api.h"
#include "core/error.h"

namespace zt::cuda {

void copy_on_device(void* device_dst, const void* device_src, size_t bytes) {
  if (bytes == 0 || device_dst == device_src) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, compute_stream()));
}

void convert_on_device(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  if (n == 0) return;
  const cudaStream_t stream = compute_stream();
  if (src_dtype == dst_dtype) return copy_on_device(dst, src, n * dtype_size(src_dtype));
  if (src_dtype == DType::F32 && dst_dtype == DType::BF16)
    return convert_f32_to_bf16(static_cast<const float*>(src), static_cast<bf16*>(dst), n, stream);
  if (src_dtype == DType::BF16 && dst_dtype == DType::F32)
    return convert_bf16_to_f32(static_cast<const bf16*>(src), static_cast<float*>(dst), n, stream);
  if (src_dtype == DType::F32 && dst_dtype == DType::F16)
    return convert_f32_to_f16(static_cast<const float*>(src), static_cast<f16*>(dst), n, stream);
  if (src_dtype == DType::F16 && dst_dtype == DType::F32)
    return convert_f16_to_f32(static_cast<const f16*>(src), static_cast<float*>(dst), n, stream);
  if (is_floating(src_dtype) && is_fp8(dst_dtype)) return convert_to_fp8(src, src_dtype, dst, dst_dtype, n);
  if (is_fp8(src_dtype) && is_floating(dst_dtype)) return convert_from_fp8(src, src_dtype, dst, dst_dtype, n);
  const auto either = [](DType d) { return is_floating(d) || is_fp8(d); };
  if (either(src_dtype) && either(dst_dtype)) {
    // bf16 <-> f16, E4M3 <-> E5M2: through f32 (exact for the widening step, one rounding at
    // the end).
    Buffer tmp(n * sizeof(float), Device::cuda(context().device));
    convert_on_device(src, src_dtype, tmp.data(), DType::F32, n);
    return convert_on_device(tmp.data(), DType::F32, dst, dst_dtype, n);
  }
  ZT_THROW_UNSUPPORTED("no device conversion from ", dtype_name(src_dtype), " to ", dtype_name(dst_dtype));
}

}  // namespace zt::cuda
