#include "core/rng.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace zt {

namespace {
// The host's arithmetic for rng_detail's templates. This file is compiled with
// -ffp-contract=off (CMakeLists.txt), so no multiply and add here are fused.
struct HostArith {
  static float add(float a, float b) { return a + b; }
  static float sub(float a, float b) { return a - b; }
  static float mul(float a, float b) { return a * b; }
  static float quot(float a, float b) { return a / b; }
  static float root(float a) { return std::sqrt(a); }
  static uint32_t bits_of(float a) {
    uint32_t b;
    std::memcpy(&b, &a, sizeof b);
    return b;
  }
  static float float_of(uint32_t b) {
    float a;
    std::memcpy(&a, &b, sizeof a);
    return a;
  }
};
}  // namespace

void normal_pair(uint32_t w0, uint32_t w1, float* z0, float* z1) { rng_detail::normal_pair<HostArith>(w0, w1, z0, z1); }

float scaled_normal(float z, float mean, float stddev) { return rng_detail::scaled_normal<HostArith>(z, mean, stddev); }

float Philox::normal(uint64_t i) const {
  // Element i uses words (2j, 2j+1) of pair j = i/2; even i takes the cos branch.
  const uint64_t pair = i / 2;
  const auto b = block(pair / 2);
  float z0, z1;
  normal_pair(b[(pair % 2) * 2], b[(pair % 2) * 2 + 1], &z0, &z1);
  return (i % 2 == 0) ? z0 : z1;
}

uint64_t hash_name(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) {
    h ^= static_cast<unsigned char>(*p);
    h *= 1099511628211ull;
  }
  return h;
}

void fill_normal(const Tensor& t, const Philox& rng, float mean, float stddev) {
  ZT_CHECK(t.device().is_cpu() && t.is_contiguous(), "fill_normal needs a contiguous host tensor");
  const int64_t n = t.numel();
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data());
    // Four elements per Philox block (two Box-Muller pairs): Philox::normal(i) for each i,
    // bit for bit, with one block per four elements. The GPU draws the same values
    // (backend/cuda/random.cu).
    const int64_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t b = 0; b < blocks; ++b) {
      const auto w = rng.block(static_cast<uint64_t>(b));
      for (int pair = 0; pair < 2; ++pair) {
        const int64_t i = 4 * b + 2 * pair;
        if (i >= n) break;
        float z0, z1;
        rng_detail::normal_pair<HostArith>(w[2 * pair], w[2 * pair + 1], &z0, &z1);
        p[i] = store_as<T>(rng_detail::scaled_normal<HostArith>(z0, mean, stddev));
        if (i + 1 < n) p[i + 1] = store_as<T>(rng_detail::scaled_normal<HostArith>(z1, mean, stddev));
      }
    }
  });
}

void fill_uniform(const Tensor& t, const Philox& rng, float low, float high) {
  ZT_CHECK(t.device().is_cpu() && t.is_contiguous(), "fill_uniform needs a contiguous host tensor");
  const int64_t n = t.numel();
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data());
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = store_as<T>(low + (high - low) * rng.uniform(static_cast<uint64_t>(i)));
  });
}

}  // namespace zt
