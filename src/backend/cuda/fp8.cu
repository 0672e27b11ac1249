// FP8 conversions and amax on the GPU; see backend/fp8_kernels.h and ops/fp8.h.
//
// Every element is one f32 multiply by the scale (__fmul_rn: never fused) and core/fp8.h's
// encode/decode, the host+device bit code the CPU backend calls too, so the results are
// bitwise the CPU's. The hardware conversion (cvt.rn.satfinite.e4m3x2.f32, sm_89+) is not
// used: it saturates always (no torch-style NaN/inf overflow) and these conversions are
// storage moves, far from the GEMMs' cost; the bit code runs on every architecture.
//
// Shape of the work: chunked.cuh's grid-stride loop over chunks of 8 elements (8 bytes of
// fp8, one 16-byte vector of 16-bit values, two of f32); misaligned pointers and the last
// partial chunk fall back to element accesses. amax: a grid-stride max of |x|'s bit
// patterns per thread, a warp and block reduction, one atomicMax per block on the f32
// result's bits (for non-negative floats the unsigned order is the numeric order and a NaN
// is above infinity), after the result was zeroed on the same stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/convert.h"
#include "backend/cuda/device/chunked.cuh"
#include "backend/fp8_kernels.h"
#include "core/dtype_dispatch.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

template <class Q>
__device__ __forceinline__ uint8_t encode(float v, Saturation sat) {
  if constexpr (std::is_same_v<Q, f8e4m3>)
    return fp8_detail::encode<fp8_detail::E4M3>(v, sat);
  else
    return fp8_detail::encode<fp8_detail::E5M2>(v, sat);
}
template <class Q>
__device__ __forceinline__ float decode(uint8_t b) {
  if constexpr (std::is_same_v<Q, f8e4m3>)
    return fp8_detail::decode<fp8_detail::E4M3>(b);
  else
    return fp8_detail::decode<fp8_detail::E5M2>(b);
}

// y = fp8(x * scale); scale == nullptr: no multiply (convert_on_device, torch's cast).
template <class Q, class T>
struct QuantizeOp {
  Q* y;
  const T* x;
  const float* scale;
  Saturation sat;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float f[kChunk];
    load_chunk(x, i, count, vec, f);
    const float s = scale ? *scale : 1.0f;
    uint8_t b[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) b[k] = encode<Q>(scale ? __fmul_rn(f[k], s) : f[k], sat);
    if (vec) {
      uint2 w;
      w.x = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
      w.y = b[4] | (b[5] << 8) | (b[6] << 16) | (static_cast<uint32_t>(b[7]) << 24);
      *reinterpret_cast<uint2*>(y + i) = w;
      return;
    }
#pragma unroll
    for (int k = 0; k < kChunk; ++k)
      if (k < count) y[i + k].bits = b[k];
  }
};

// y = float(x) * scale rounded to T; scale == nullptr: no multiply.
template <class T, class Q>
struct DequantizeOp {
  T* y;
  const Q* x;
  const float* scale;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    uint8_t b[kChunk];
    if (vec) {
      const uint2 w = *reinterpret_cast<const uint2*>(x + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        b[k] = static_cast<uint8_t>(w.x >> (8 * k));
        b[4 + k] = static_cast<uint8_t>(w.y >> (8 * k));
      }
    } else {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) b[k] = k < count ? x[i + k].bits : 0;
    }
    const float s = scale ? *scale : 1.0f;
    float f[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) f[k] = scale ? __fmul_rn(decode<Q>(b[k]), s) : decode<Q>(b[k]);
    store_chunk(y, i, count, vec, f);
  }
};

void quantize(void* out, DType out_dtype, const void* inp, DType inp_dtype, int64_t n, const float* scale,
              Saturation sat) {
  const bool aligned = aligned16(out) && aligned16(inp);
  dispatch_fp8(out_dtype, [&](auto q) {
    dispatch_float(inp_dtype, [&](auto t) {
      using Q = decltype(q);
      using T = decltype(t);
      launch_chunked(QuantizeOp<Q, T>{static_cast<Q*>(out), static_cast<const T*>(inp), scale, sat}, n, aligned);
    });
  });
}

void dequantize(void* out, DType out_dtype, const void* inp, DType inp_dtype, int64_t n, const float* scale) {
  const bool aligned = aligned16(out) && aligned16(inp);
  dispatch_fp8(inp_dtype, [&](auto q) {
    dispatch_float(out_dtype, [&](auto t) {
      using Q = decltype(q);
      using T = decltype(t);
      launch_chunked(DequantizeOp<T, Q>{static_cast<T*>(out), static_cast<const Q*>(inp), scale}, n, aligned);
    });
  });
}

constexpr int kAmaxMaxBlocks = 1024;

template <class T>
__global__ void amax_kernel(const T* __restrict__ x, int64_t n, unsigned int* out) {
  uint32_t best = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    best = max(best, __float_as_uint(to_float(x[i])) & 0x7fffffffu);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  __shared__ uint32_t warp_best[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = lane < static_cast<int>(blockDim.x / 32) ? warp_best[lane] : 0u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    if (lane == 0 && best != 0) atomicMax(out, best);
  }
}

}  // namespace

void fp8_quantize(const Tensor& out, const Tensor& inp, const Tensor& scale, Saturation saturation) {
  quantize(out.data(), out.dtype(), inp.data(), inp.dtype(), inp.numel(), static_cast<const float*>(scale.data()),
           saturation);
}

void fp8_dequantize(const Tensor& out, const Tensor& inp, const Tensor& scale) {
  dequantize(out.data(), out.dtype(), inp.data(), inp.dtype(), inp.numel(), static_cast<const float*>(scale.data()));
}

void amax(const Tensor& out, const Tensor& inp) {
  const cudaStream_t stream = compute_stream();
  ZT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0, sizeof(float), stream));
  const int64_t n = inp.numel();
  if (n == 0) return;
  const unsigned blocks = grid_for(n, kAmaxMaxBlocks);
  dispatch_float(inp.dtype(), [&](auto t) {
    using T = decltype(t);
    amax_kernel<T>
        <<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(inp.data()), n, static_cast<unsigned int*>(out.data()));
    ZT_CUDA_CHECK_LAST();
  });
}

void convert_to_fp8(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  quantize(dst, dst_dtype, src, src_dtype, static_cast<int64_t>(n), nullptr, Saturation::NonSaturating);
}

void convert_from_fp8(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  dequantize(dst, dst_dtype, src, src_dtype, static_cast<int64_t>(n), nullptr);
}

}  // namespace zt::cuda
