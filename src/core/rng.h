// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011). A value depends only
// on (seed, stream, index), never on call order or thread count, so initialisation and
// dropout masks are identical across runs, ranks, thread counts and devices (the CUDA
// kernels use the same function).
#pragma once
#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace zt {

#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

struct PhiloxKey {
  uint32_t k0, k1;
};

// Four 32-bit random words for counter (c0..c3) under key.
ZT_HOST_DEVICE inline void philox4x32_10(uint32_t c[4], PhiloxKey key) {
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// Uniform in [0, 1) with 24 random bits.
ZT_HOST_DEVICE inline float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// The random stream for one purpose (e.g. one parameter's init, one step's dropout).
class Philox {
 public:
  Philox(uint64_t seed, uint64_t stream)
      : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, stream_(stream) {}
  // Four words for block `index` of this stream.
  std::array<uint32_t, 4> block(uint64_t index) const {
    uint32_t c[4] = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(stream_),
                     static_cast<uint32_t>(stream_ >> 32)};
    philox4x32_10(c, key_);
    return {c[0], c[1], c[2], c[3]};
  }
  // Element i's uniform in [0,1) and standard normal (Box-Muller on a pair of words).
  float uniform(uint64_t i) const { return uniform_from_bits(block(i / 4)[i % 4]); }
  float normal(uint64_t i) const;
  PhiloxKey key() const { return key_; }
  uint64_t stream() const { return stream_; }

 private:
  PhiloxKey key_;
  uint64_t stream_;
};

// Stable 64-bit hash of a string (FNV-1a), for deriving a stream from a parameter name.
uint64_t hash_name(const char* name);

// Host fills: element i of the flat tensor gets value i of the stream.
void fill_normal(const Tensor& t, const Philox& rng, float mean, float stddev);
void fill_uniform(const Tensor& t, const Philox& rng, float low, float high);

}  // namespace zt
