// Inverted dropout on the GPU; see backend/dropout_kernels.h.
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
#include "backend/cuda/device/chunked.cuh"
#include "backend/dropout_kernels.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

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
      uint32_t c[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(stream),
                       static_cast<uint32_t>(stream >> 32)};
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
    launch_chunked(
        DropoutOp<T>{static_cast<T*>(y.data()), static_cast<const T*>(x.data()), p, scale, rng.key(), rng.stream()}, n,
        aligned);
  };
  switch (x.dtype()) {
    case DType::F32:
      run(float{});
      return;
    case DType::BF16:
      run(bf16{});
      return;
    case DType::F16:
      run(f16{});
      return;
    default:
      break;
  }
  ZT_THROW_UNSUPPORTED("CUDA dropout takes f32, bf16 or f16 tensors, got ", dtype_name(x.dtype()));
}

}  // namespace

void dropout_forward(const Tensor& out, const Tensor& inp, float p, const Philox& rng) {
  dropout_apply(out, inp, p, rng);
}

void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, const Philox& rng) {
  dropout_apply(dinp, dout, p, rng);
}

}  // namespace zt::cuda
