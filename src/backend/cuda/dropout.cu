// Inverted dropout on the GPU; see dropout_ops.h.
//
// Accumulation rule: out / dinp (=); both may alias their input. Forward and backward are
// the same map y = keep(i) ? x * (1/(1-p)) : 0, with keep(i) = uniform(i) >= p regenerated
// from Philox4x32-10: core/rng.h's philox4x32_10 and uniform_from_bits are host+device
// functions, and this file calls exactly those, so element i's uniform is bitwise the CPU's
// Philox::uniform(i) = uniform_from_bits(block(i / 4)[i % 4]). The scale is the CPU's f32
// 1/(1-p) and the product one f32 multiply, so f32 outputs are bitwise the CPU's too.
//
// Shape of the work: a thread handles chunks of 8 consecutive elements (two Philox blocks,
// one 16-byte vector of bf16, two of f32) in a grid-stride loop of 256-thread blocks;
// misaligned pointers and the last partial chunk fall back to element accesses.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/dropout_ops.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

// ---- chunked element access -----------------------------------------------------------------
// The same block opens elementwise.cu, activation.cu, dropout.cu and optimizer.cu (each .cu
// is compiled alone); a shared header under backend/cuda/device/ is where it would go.

constexpr int kThreads = 256;
constexpr int kChunk = 8;              // elements per thread step: 16 bytes of 16-bit values
constexpr int64_t kMaxBlocks = 8192;   // more work than this grid covers is grid-strided

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
unsigned grid_for(int64_t chunks, int64_t max_blocks = kMaxBlocks) {
  return static_cast<unsigned>(std::min<int64_t>((chunks + kThreads - 1) / kThreads, max_blocks));
}

template <class Op>
void launch_chunked(const Op& op, int64_t n, bool aligned) {
  if (n <= 0) return;
  chunked_kernel<<<grid_for(chunks_of(n)), kThreads, 0, compute_stream()>>>(op, n, aligned);
  ZT_CUDA_CHECK_LAST();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- dropout ------------------------------------------------------------------------------

template <class T>
struct DropoutOp {
  T* y;
  const T* x;
  float p;
  float scale;
  PhiloxKey key;
  uint64_t stream;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    // i is a multiple of 8: Philox blocks i/4 and i/4 + 1 hold the uniforms of i .. i+7.
    uint32_t w[kChunk];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint64_t block = static_cast<uint64_t>(i) / 4 + b;
      uint32_t c[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                       static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
      philox4x32_10(c, key);
#pragma unroll
      for (int k = 0; k < 4; ++k) w[4 * b + k] = c[k];
    }
    float f[kChunk];
    load_chunk(x, i, count, vec, f);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) f[k] = uniform_from_bits(w[k]) >= p ? f[k] * scale : 0.0f;
    store_chunk(y, i, count, vec, f);
  }
};

void dropout_apply(const Tensor& y, const Tensor& x, float p, const Philox& rng) {
  const int64_t n = x.numel();
  if (n == 0) return;
  if (p == 0.0f) {
    if (y.data() != x.data())
      ZT_CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), x.nbytes(), cudaMemcpyDeviceToDevice, compute_stream()));
    return;
  }
  const float scale = 1.0f / (1.0f - p);  // the CPU's f32 expression
  const bool aligned = aligned16(y.data()) && aligned16(x.data());
  auto run = [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(DropoutOp<T>{static_cast<T*>(y.data()), static_cast<const T*>(x.data()), p, scale, rng.key(),
                                rng.stream()},
                   n, aligned);
  };
  switch (x.dtype()) {
    case DType::F32: run(float{}); return;
    case DType::BF16: run(bf16{}); return;
    default: break;
  }
  ZT_THROW_UNSUPPORTED("CUDA dropout takes f32 or bf16 tensors, got ", dtype_name(x.dtype()));
}

}  // namespace

void dropout_forward(const Tensor& out, const Tensor& inp, float p, const Philox& rng) {
  dropout_apply(out, inp, p, rng);
}

void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, const Philox& rng) {
  dropout_apply(dinp, dout, p, rng);
}

}  // namespace zt::cuda
