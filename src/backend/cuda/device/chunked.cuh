// Chunked element access for the pointwise kernels (elementwise, activation, dropout,
// optimizer): a thread handles chunks of 8 consecutive elements (one 16-byte vector of
// 16-bit values, two of f32) in a grid-stride loop of 256-thread blocks; full chunks at
// 16-byte-aligned addresses move as vectors, the rest element by element. Conversions
// round as core/dtype.h does (bf16 bit for bit; f16 with __float2half_rn).
//
// Device-only: include from .cu files. The helpers live in an unnamed namespace, so each
// .cu keeps its own copy as when they were written inline (no device linking needed).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "core/dtype.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 8;             // elements per thread step: 16 bytes of 16-bit values
constexpr int64_t kMaxBlocks = 8192;  // more work than this grid covers is grid-strided

// f32 value of a stored element, and the stored element for an f32 value: bf16 rounds as
// core/dtype.h's to_bf16 bit for bit (nearest even, NaN stays a quiet NaN), f16 as
// __float2half_rn (nearest even, as the CPU's F16C conversion).
template <class T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
  } else {
    static_assert(std::is_same_v<T, f16>);
    return __half2float(__ushort_as_half(v.bits));
  }
}
template <class T>
__device__ __forceinline__ T from_float(float f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else if constexpr (std::is_same_v<T, bf16>) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16{static_cast<uint16_t>(u >> 16)};
  } else {
    static_assert(std::is_same_v<T, f16>);
    return f16{__half_as_ushort(__float2half_rn(f))};
  }
}

__device__ __forceinline__ void load_vec(const float* p, float (&f)[kChunk]) {
  const float4* q = reinterpret_cast<const float4*>(p);
  const float4 a = q[0], b = q[1];
  f[0] = a.x;
  f[1] = a.y;
  f[2] = a.z;
  f[3] = a.w;
  f[4] = b.x;
  f[5] = b.y;
  f[6] = b.z;
  f[7] = b.w;
}
template <class H>  // bf16 or f16: eight 16-bit values in one 16-byte load, element 0 in the low half
__device__ __forceinline__ void load_vec(const H* p, float (&f)[kChunk]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = to_float(H{static_cast<uint16_t>(w[k])});
    f[2 * k + 1] = to_float(H{static_cast<uint16_t>(w[k] >> 16)});
  }
}
__device__ __forceinline__ void store_vec(float* p, const float (&f)[kChunk]) {
  float4* q = reinterpret_cast<float4*>(p);
  q[0] = make_float4(f[0], f[1], f[2], f[3]);
  q[1] = make_float4(f[4], f[5], f[6], f[7]);
}
template <class H>
__device__ __forceinline__ void store_vec(H* p, const float (&f)[kChunk]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = from_float<H>(f[2 * k]).bits | (static_cast<uint32_t>(from_float<H>(f[2 * k + 1]).bits) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// Elements [i, i + count) of p as f32; lanes from count on read as 0 (and are never stored).
// vec: the chunk is full and p is 16-byte aligned.
template <class T>
__device__ __forceinline__ void load_chunk(const T* p, int64_t i, int count, bool vec, float (&f)[kChunk]) {
  if (vec) {
    load_vec(p + i, f);
    return;
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k) f[k] = k < count ? to_float(p[i + k]) : 0.0f;
}
template <class T>
__device__ __forceinline__ void store_chunk(T* p, int64_t i, int count, bool vec, const float (&f)[kChunk]) {
  if (vec) {
    store_vec(p + i, f);
    return;
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k)
    if (k < count) p[i + k] = from_float<T>(f[k]);
}

__host__ __device__ __forceinline__ int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// op(i, count, vec) for every chunk [i, i + count) of [0, n), grid-stride.
template <class Op>
__global__ void chunked_kernel(Op op, int64_t n, bool aligned) {
  const int64_t chunks = chunks_of(n);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const int64_t i = c * kChunk;
    const int count = static_cast<int>(n - i < kChunk ? n - i : kChunk);
    op(i, count, aligned && count == kChunk);
  }
}

// Blocks for `chunks` thread steps: one step per thread, at most max_blocks (then grid-stride).
inline unsigned grid_for(int64_t chunks, int64_t max_blocks = kMaxBlocks) {
  return static_cast<unsigned>(std::min<int64_t>((chunks + kThreads - 1) / kThreads, max_blocks));
}

template <class Op>
void launch_chunked(const Op& op, int64_t n, bool aligned) {
  if (n <= 0) return;
  chunked_kernel<<<grid_for(chunks_of(n)), kThreads, 0, compute_stream()>>>(op, n, aligned);
  ZT_CUDA_CHECK_LAST();
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace
}  // namespace zt::cuda
