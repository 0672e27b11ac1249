// Random fills on the GPU; see backend/random_kernels.h.
//
// Element i is core/rng.h's Philox::normal(i): pair j = i/2 takes words (2j mod 4,
// 2j+1 mod 4) of Philox block j/2, and rng_detail::normal_pair runs here with DeviceArith's
// _rn intrinsics, so no multiply-add is fused and every value is bitwise the host's
// fill_normal. A thread
// handles chunks of 8 elements (two Philox blocks, four pairs) through chunked.cuh.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/chunked.cuh"
#include "backend/random_kernels.h"
#include "core/dtype_dispatch.h"

namespace zt::cuda {
namespace {

template <class T>
struct NormalFillOp {
  T* y;
  float mean, stddev;
  PhiloxKey key;
  uint64_t stream;
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float f[kChunk];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint64_t block = static_cast<uint64_t>(i) / 4 + b;
      uint32_t c[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(stream),
                       static_cast<uint32_t>(stream >> 32)};
      philox4x32_10(c, key);
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        float z0, z1;
        rng_detail::normal_pair<rng_detail::DeviceArith>(c[2 * pair], c[2 * pair + 1], &z0, &z1);
        f[4 * b + 2 * pair] = rng_detail::scaled_normal<rng_detail::DeviceArith>(z0, mean, stddev);
        f[4 * b + 2 * pair + 1] = rng_detail::scaled_normal<rng_detail::DeviceArith>(z1, mean, stddev);
      }
    }
    store_chunk(y, i, count, vec, f);
  }
};

}  // namespace

void fill_normal(const Tensor& t, const Philox& rng, float mean, float stddev) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const bool aligned = aligned16(t.data());
  // ops::fill_normal has checked the dtype is f32, bf16 or f16.
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_chunked(NormalFillOp<T>{static_cast<T*>(t.data()), mean, stddev, rng.key(), rng.stream()}, n, aligned);
  });
}

}  // namespace zt::cuda
