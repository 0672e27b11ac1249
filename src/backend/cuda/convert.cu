// Conversion and fill kernels; see convert.h.
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/convert.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kVec = 8;  // elements per 16-byte vector of 16-bit values

// Same bit manipulation as core/dtype.h to_bf16 (round to nearest even, quiet NaN).
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ float f16_bits_to_f32(uint16_t b) { return __half2float(__ushort_as_half(b)); }

struct ToBF16 {
  __device__ uint16_t operator()(float f) const { return f32_to_bf16_bits(f); }
};
struct ToF16 {
  __device__ uint16_t operator()(float f) const { return f32_to_f16_bits(f); }
};
struct FromBF16 {
  __device__ float operator()(uint16_t b) const { return bf16_bits_to_f32(b); }
};
struct FromF16 {
  __device__ float operator()(uint16_t b) const { return f16_bits_to_f32(b); }
};

__device__ __forceinline__ size_t thread_index() { return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t grid_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// f32 -> 16-bit: two 16-byte loads, one 16-byte store per vector.
template <class Op>
__global__ void narrow_vec_kernel(const float4* __restrict__ src, uint4* __restrict__ dst, size_t vectors, Op op) {
  for (size_t i = thread_index(); i < vectors; i += grid_stride()) {
    const float4 a = src[2 * i], b = src[2 * i + 1];
    uint4 out;
    out.x = op(a.x) | (static_cast<uint32_t>(op(a.y)) << 16);
    out.y = op(a.z) | (static_cast<uint32_t>(op(a.w)) << 16);
    out.z = op(b.x) | (static_cast<uint32_t>(op(b.y)) << 16);
    out.w = op(b.z) | (static_cast<uint32_t>(op(b.w)) << 16);
    dst[i] = out;
  }
}

// 16-bit -> f32: one 16-byte load, two 16-byte stores per vector.
template <class Op>
__global__ void widen_vec_kernel(const uint4* __restrict__ src, float4* __restrict__ dst, size_t vectors, Op op) {
  for (size_t i = thread_index(); i < vectors; i += grid_stride()) {
    const uint4 v = src[i];
    dst[2 * i] = make_float4(op(static_cast<uint16_t>(v.x)), op(static_cast<uint16_t>(v.x >> 16)),
                             op(static_cast<uint16_t>(v.y)), op(static_cast<uint16_t>(v.y >> 16)));
    dst[2 * i + 1] = make_float4(op(static_cast<uint16_t>(v.z)), op(static_cast<uint16_t>(v.z >> 16)),
                                 op(static_cast<uint16_t>(v.w)), op(static_cast<uint16_t>(v.w >> 16)));
  }
}

template <class In, class Out, class Op>
__global__ void scalar_kernel(const In* __restrict__ src, Out* __restrict__ dst, size_t n, Op op) {
  for (size_t i = thread_index(); i < n; i += grid_stride()) dst[i] = op(src[i]);
}

template <class T>
__global__ void fill_vec_kernel(uint4* __restrict__ dst, uint4 pattern, size_t vectors) {
  for (size_t i = thread_index(); i < vectors; i += grid_stride()) dst[i] = pattern;
}

template <class T>
__global__ void fill_scalar_kernel(T* __restrict__ dst, T value, size_t n) {
  for (size_t i = thread_index(); i < n; i += grid_stride()) dst[i] = value;
}

unsigned blocks_for(size_t work) {
  // Grid-stride loops: enough blocks to fill any current GPU, never more than needed.
  const size_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class Op>
void narrow(const float* src, uint16_t* dst, size_t n, cudaStream_t stream, Op op) {
  if (n == 0) return;
  size_t done = 0;
  if (aligned16(src) && aligned16(dst)) {
    const size_t vectors = n / kVec;
    if (vectors) {
      narrow_vec_kernel<<<blocks_for(vectors), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(src),
                                                                      reinterpret_cast<uint4*>(dst), vectors, op);
      ZT_CUDA_CHECK_LAST();
    }
    done = vectors * kVec;
  }
  if (done < n) {
    scalar_kernel<<<blocks_for(n - done), kThreads, 0, stream>>>(src + done, dst + done, n - done, op);
    ZT_CUDA_CHECK_LAST();
  }
}

template <class Op>
void widen(const uint16_t* src, float* dst, size_t n, cudaStream_t stream, Op op) {
  if (n == 0) return;
  size_t done = 0;
  if (aligned16(src) && aligned16(dst)) {
    const size_t vectors = n / kVec;
    if (vectors) {
      widen_vec_kernel<<<blocks_for(vectors), kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(src),
                                                                     reinterpret_cast<float4*>(dst), vectors, op);
      ZT_CUDA_CHECK_LAST();
    }
    done = vectors * kVec;
  }
  if (done < n) {
    scalar_kernel<<<blocks_for(n - done), kThreads, 0, stream>>>(src + done, dst + done, n - done, op);
    ZT_CUDA_CHECK_LAST();
  }
}

// Fills n elements of T (4 or 2 bytes) with the bit pattern `bits`.
template <class T>
void fill_bits(T* dst, T bits, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr size_t per_vec = 16 / sizeof(T);
  size_t done = 0;
  if (aligned16(dst)) {
    const size_t vectors = n / per_vec;
    if (vectors) {
      uint32_t word = sizeof(T) == 4 ? static_cast<uint32_t>(bits) : static_cast<uint32_t>(bits) * 0x10001u;
      const uint4 pattern = make_uint4(word, word, word, word);
      fill_vec_kernel<T><<<blocks_for(vectors), kThreads, 0, stream>>>(reinterpret_cast<uint4*>(dst), pattern, vectors);
      ZT_CUDA_CHECK_LAST();
    }
    done = vectors * per_vec;
  }
  if (done < n) {
    fill_scalar_kernel<T><<<blocks_for(n - done), kThreads, 0, stream>>>(dst + done, bits, n - done);
    ZT_CUDA_CHECK_LAST();
  }
}

uint16_t* bits_of(bf16* p) { return reinterpret_cast<uint16_t*>(p); }
uint16_t* bits_of(f16* p) { return reinterpret_cast<uint16_t*>(p); }
const uint16_t* bits_of(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
const uint16_t* bits_of(const f16* p) { return reinterpret_cast<const uint16_t*>(p); }

}  // namespace

void convert_f32_to_bf16(const float* src, bf16* dst, size_t n, cudaStream_t stream) {
  narrow(src, bits_of(dst), n, stream, ToBF16{});
}
void convert_bf16_to_f32(const bf16* src, float* dst, size_t n, cudaStream_t stream) {
  widen(bits_of(src), dst, n, stream, FromBF16{});
}
void convert_f32_to_f16(const float* src, f16* dst, size_t n, cudaStream_t stream) {
  narrow(src, bits_of(dst), n, stream, ToF16{});
}
void convert_f16_to_f32(const f16* src, float* dst, size_t n, cudaStream_t stream) {
  widen(bits_of(src), dst, n, stream, FromF16{});
}

void fill_f32(float* dst, float value, size_t n, cudaStream_t stream) {
  fill_bits(reinterpret_cast<uint32_t*>(dst), f32_bits(value), n, stream);
}
void fill_bf16(bf16* dst, float value, size_t n, cudaStream_t stream) {
  fill_bits(bits_of(dst), to_bf16(value).bits, n, stream);
}

}  // namespace zt::cuda
