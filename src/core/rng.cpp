#include "core/rng.h"

#include <cmath>

#include "core/error.h"

namespace zt {

float Philox::normal(uint64_t i) const {
  // Element i uses words (2j, 2j+1) of pair j = i/2; even i takes the cos branch.
  const uint64_t pair = i / 2;
  const auto b = block(pair / 2);
  const uint32_t w0 = b[(pair % 2) * 2], w1 = b[(pair % 2) * 2 + 1];
  const float u1 = (static_cast<float>(w0 >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  const float u2 = uniform_from_bits(w1);
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float theta = 6.2831853071795864f * u2;
  return (i % 2 == 0) ? r * std::cos(theta) : r * std::sin(theta);
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
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] = store_as<T>(mean + stddev * rng.normal(static_cast<uint64_t>(i)));
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
