// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011). A value depends only
// on (seed, stream, index), never on call order or thread count, so initialisation and
// dropout masks are identical across runs, ranks, thread counts and devices (the CUDA
// kernels use the same function).
#pragma once
#include <array>
#include <cstdint>

#include "core/host_device.h"
#include "core/tensor.h"

namespace zt {

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

// ---- Box-Muller with the same bits on every device -------------------------------------
// A normal pair from two Philox words, computed with IEEE-rounded +, -, *, / and sqrt only:
// no libm, and no fused multiply-add (the host's instantiation lives in rng.cpp, compiled
// with -ffp-contract=off; the device's uses the _rn intrinsics). The host and the GPU then
// draw bit-identical values, and a model initialised on the GPU equals one initialised on
// the host. The log and sin/cos are polynomials accurate to ~1e-7 relative
// (tests/unit/rng_test.cpp checks them against libm), far below what an initialisation
// can tell. `A` supplies the arithmetic: add, sub, mul, quot, root, bits_of, float_of.
namespace rng_detail {

// ln(u) for a normal float u > 0: u = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
// ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716, five odd terms (error < 1e-9).
template <class A>
ZT_HOST_DEVICE inline float log_portable(float u) {
  const uint32_t b = A::bits_of(u);
  int e = static_cast<int>((b >> 23) & 0xFFu) - 127;
  float m = A::float_of((b & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  if (m > 1.41421356f) {
    m = A::mul(m, 0.5f);  // exact
    e += 1;
  }
  const float s = A::quot(A::sub(m, 1.0f), A::add(m, 1.0f));
  const float s2 = A::mul(s, s);
  float p = 2.0f / 9.0f;
  p = A::add(A::mul(p, s2), 2.0f / 7.0f);
  p = A::add(A::mul(p, s2), 2.0f / 5.0f);
  p = A::add(A::mul(p, s2), 2.0f / 3.0f);
  p = A::add(A::mul(p, s2), 2.0f);
  const float ln_m = A::mul(s, p);
  const float fe = static_cast<float>(e);
  // ln 2 in two parts: fe * hi is exact for |e| < 2^8.
  return A::add(A::mul(fe, 0.693145751953125f), A::add(A::mul(fe, 1.42860682030941723212e-6f), ln_m));
}

// sin and cos of a in [0, pi/4]: Taylor to a^9 / a^10 (error < 2e-9).
template <class A>
ZT_HOST_DEVICE inline void sincos_octant(float a, float* s, float* c) {
  const float a2 = A::mul(a, a);
  float ps = 1.0f / 362880.0f;  // sin(a)/a = 1 - a^2/3! + a^4/5! - a^6/7! + a^8/9!
  ps = A::add(A::mul(ps, a2), -1.0f / 5040.0f);
  ps = A::add(A::mul(ps, a2), 1.0f / 120.0f);
  ps = A::add(A::mul(ps, a2), -1.0f / 6.0f);
  *s = A::add(a, A::mul(A::mul(a, a2), ps));
  float pc = -1.0f / 3628800.0f;
  pc = A::add(A::mul(pc, a2), 1.0f / 40320.0f);
  pc = A::add(A::mul(pc, a2), -1.0f / 720.0f);
  pc = A::add(A::mul(pc, a2), 1.0f / 24.0f);
  pc = A::add(A::mul(pc, a2), -0.5f);
  *c = A::add(1.0f, A::mul(a2, pc));
}

// cos and sin of 2 pi k / 2^24 for k in [0, 2^24): the octant comes from k's top three
// bits, so the argument reduction is exact integer arithmetic.
template <class A>
ZT_HOST_DEVICE inline void cos_sin_turns(uint32_t k, float* cos_out, float* sin_out) {
  constexpr float kQuarterPiOver2p21 = 0.78539816339744830962f / 2097152.0f;
  const uint32_t octant = k >> 21, rem = k & 0x1FFFFFu;
  // angle = quarter * pi/2 + t, t in [-pi/4, pi/4]: even octants t = a, odd ones t = -a'
  // with a' = pi/4 - a, from the exact integer 2^21 - rem.
  const bool odd = (octant & 1u) != 0;
  const uint32_t quarter = ((octant + (odd ? 1u : 0u)) >> 1) & 3u;
  const float a = A::mul(static_cast<float>(odd ? 0x200000u - rem : rem), kQuarterPiOver2p21);
  float s, c;
  sincos_octant<A>(a, &s, &c);
  if (odd) s = -s;
  switch (quarter) {
    case 0:
      *cos_out = c;
      *sin_out = s;
      break;
    case 1:
      *cos_out = -s;
      *sin_out = c;
      break;
    case 2:
      *cos_out = -c;
      *sin_out = -s;
      break;
    default:
      *cos_out = s;
      *sin_out = -c;
      break;
  }
}

// Two standard normals from two Philox words: u1 = (w0 >> 8 + 1) / 2^24 in (0, 1],
// u2 = (w1 >> 8) / 2^24 in [0, 1); z0 = r cos(2 pi u2), z1 = r sin(2 pi u2),
// r = sqrt(-2 ln u1).
template <class A>
ZT_HOST_DEVICE inline void normal_pair(uint32_t w0, uint32_t w1, float* z0, float* z1) {
  const float u1 = A::mul(static_cast<float>((w0 >> 8) + 1u), 1.0f / 16777216.0f);  // exact
  const float r = A::root(A::mul(-2.0f, log_portable<A>(u1)));
  float c, s;
  cos_sin_turns<A>(w1 >> 8, &c, &s);
  *z0 = A::mul(r, c);
  *z1 = A::mul(r, s);
}

// mean + stddev * z, rounded twice (never one fused multiply-add).
template <class A>
ZT_HOST_DEVICE inline float scaled_normal(float z, float mean, float stddev) {
  return A::add(mean, A::mul(stddev, z));
}

#if defined(__CUDACC__)
// The device's arithmetic: each operation rounded on its own.
struct DeviceArith {
  __device__ static float add(float a, float b) { return __fadd_rn(a, b); }
  __device__ static float sub(float a, float b) { return __fsub_rn(a, b); }
  __device__ static float mul(float a, float b) { return __fmul_rn(a, b); }
  __device__ static float quot(float a, float b) { return __fdiv_rn(a, b); }
  __device__ static float root(float a) { return __fsqrt_rn(a); }
  __device__ static uint32_t bits_of(float a) { return __float_as_uint(a); }
  __device__ static float float_of(uint32_t b) { return __uint_as_float(b); }
};
#endif

}  // namespace rng_detail

// The host's normal_pair and scaled_normal (rng.cpp): bitwise the device's
// rng_detail::normal_pair<DeviceArith> and scaled_normal<DeviceArith>.
void normal_pair(uint32_t w0, uint32_t w1, float* z0, float* z1);
float scaled_normal(float z, float mean, float stddev);

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

// Host fills: element i of the flat tensor gets value i of the stream. fill_normal's values
// are normal_pair's, in pairs (2j, 2j+1) from words (2j mod 4, 2j+1 mod 4) of block j/2;
// ops::fill_normal draws the same values on a GPU tensor.
void fill_normal(const Tensor& t, const Philox& rng, float mean, float stddev);
void fill_uniform(const Tensor& t, const Philox& rng, float low, float high);

}  // namespace zt
