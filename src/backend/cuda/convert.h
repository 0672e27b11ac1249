// Element-wise conversion and fill kernels (convert.cu). Asynchronous on `stream`; n may be
// 0. When both pointers are 16-byte aligned each thread moves 16-byte vectors (8 elements);
// otherwise a scalar path runs. Rounding is that of core/dtype.h: bf16/f16 round to nearest
// even; bf16 keeps NaN payloads as core does, f16 NaNs come out as a quiet NaN.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "core/dtype.h"

namespace zt::cuda {

void convert_f32_to_bf16(const float* src, bf16* dst, size_t n, cudaStream_t stream);
void convert_bf16_to_f32(const bf16* src, float* dst, size_t n, cudaStream_t stream);
void convert_f32_to_f16(const float* src, f16* dst, size_t n, cudaStream_t stream);
void convert_f16_to_f32(const f16* src, float* dst, size_t n, cudaStream_t stream);

// A compute dtype (f32, bf16, f16) to fp8 and back, on the compute stream, as core's
// convert() does: torch's .to() (no scale, nearest even, no saturation). fp8.cu.
void convert_to_fp8(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);
void convert_from_fp8(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

void fill_f32(float* dst, float value, size_t n, cudaStream_t stream);
// Fills with value rounded to bf16.
void fill_bf16(bf16* dst, float value, size_t n, cudaStream_t stream);

}  // namespace zt::cuda
