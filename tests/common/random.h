// Random inputs and float/double conversions shared by the op gradient tests.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace zt::testing {

// n samples of N(0, scale^2) from a mt19937 seeded with seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// The float vector widened to double, for the double-precision references.
inline std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Dot product in double precision (the scalar loss sum(out * w) of the gradient checks).
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace zt::testing
