// CPU inverted dropout (see dropout.h).
//
// Accumulation rule: out / dinp (=). Forward and backward are the same map
// y = x * mask / (1-p), with mask regenerated from Philox: one 4x32 block gives the
// uniforms of elements 4j..4j+3, exactly as Philox::uniform(i) = block(i/4)[i%4].
// p == 0 copies. Philox blocks are generated 8 at a time with the rounds vectorised
// across blocks; groups of 32 elements run in parallel.
#include "backend/dropout_kernels.h"

#include <algorithm>
#include <cstring>

namespace zt::cpu {

namespace {

constexpr int kLanes = 8;  // Philox blocks generated together (vectorised across lanes)

// Words of blocks first..first+kLanes-1 of the stream in element order:
// w[4 * lane + k] = block(first + lane)[k].
// The same arithmetic as philox4x32_10, laid out so that each round is a vector operation.
inline void philox_lanes(const Philox& rng, uint64_t first, uint32_t* w) {
  const PhiloxKey key = rng.key();
  const uint64_t stream = rng.stream();
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t idx = first + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(idx);
    c1[l] = static_cast<uint32_t>(idx >> 32);
    c2[l] = static_cast<uint32_t>(stream);
    c3[l] = static_cast<uint32_t>(stream >> 32);
  }
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[l];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = static_cast<uint32_t>(p1);
      c3[l] = static_cast<uint32_t>(p0);
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int l = 0; l < kLanes; ++l) {
    w[4 * l + 0] = c0[l];
    w[4 * l + 1] = c1[l];
    w[4 * l + 2] = c2[l];
    w[4 * l + 3] = c3[l];
  }
}

// y[i] = keep(i) ? x[i] * scale : 0. Used for both forward and backward.
void dropout_apply(float* y, const float* x, int64_t n, float p, const Philox& rng) {
  if (n <= 0) return;
  if (p == 0.0f) {
    if (y != x) std::memmove(y, x, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const float scale = 1.0f / (1.0f - p);
  constexpr int64_t kGroup = 4 * kLanes;  // elements per philox_lanes call
  const int64_t ngroups = (n + kGroup - 1) / kGroup;
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t g = 0; g < ngroups; ++g) {
    alignas(32) uint32_t w[kGroup];
    philox_lanes(rng, static_cast<uint64_t>(g) * kLanes, w);
    const int64_t i0 = g * kGroup;
    if (i0 + kGroup <= n) {
#pragma omp simd
      for (int64_t k = 0; k < kGroup; ++k) {
        const bool keep = uniform_from_bits(w[k]) >= p;
        y[i0 + k] = keep ? x[i0 + k] * scale : 0.0f;
      }
    } else {
      for (int64_t k = 0; i0 + k < n; ++k) {
        const bool keep = uniform_from_bits(w[k]) >= p;
        y[i0 + k] = keep ? x[i0 + k] * scale : 0.0f;
      }
    }
  }
}

}  // namespace

void dropout_forward(const Tensor& out, const Tensor& inp, float p, const Philox& rng) {
  dropout_apply(static_cast<float*>(out.data()), static_cast<const float*>(inp.data()), inp.numel(), p, rng);
}
void dropout_backward(const Tensor& dinp, const Tensor& dout, float p, const Philox& rng) {
  dropout_apply(static_cast<float*>(dinp.data()), static_cast<const float*>(dout.data()), dout.numel(), p, rng);
}

}  // namespace zt::cpu
