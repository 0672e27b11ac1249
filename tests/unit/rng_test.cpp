#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace zt {
namespace {

// fill_normal draws a block per four elements; element i must still be Philox::normal(i)
// bit for bit (the weights of a seed never change), at every length and offset of the tail.
TEST(FillNormal, EveryElementIsPhiloxNormalOfItsIndex) {
  const Philox rng(42, 7);
  for (const int64_t n : {1, 2, 3, 4, 5, 7, 1001, 70001}) {
    OwnedTensor t({n}, DType::F32);
    fill_normal(t, rng, 0.5f, 0.02f);
    const float* p = t.data<float>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = scaled_normal(rng.normal(static_cast<uint64_t>(i)), 0.5f, 0.02f);
      wrong += std::memcmp(&want, &p[i], sizeof want) != 0;
    }
    EXPECT_EQ(wrong, 0) << "n = " << n;
  }
}

TEST(FillNormal, SixteenBitStorageRoundsTheSameValues) {
  const Philox rng(3, 1);
  const int64_t n = 70003;
  OwnedTensor wide({n}, DType::F32), narrow({n}, DType::BF16);
  fill_normal(wide, rng, 0.0f, 1.0f);
  fill_normal(narrow, rng, 0.0f, 1.0f);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += narrow->get_f32(i) != to_f32(to_bf16(wide.data<float>()[i]));
  EXPECT_EQ(wrong, 0);
  // A standard normal's moments, loosely (70k draws).
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += wide.data<float>()[i];
    sq += static_cast<double>(wide.data<float>()[i]) * wide.data<float>()[i];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sq / n, 1.0, 0.03);
}

// normal_pair's polynomial log and sin/cos (the same bits on the host and the GPU) against
// libm's Box-Muller in double: within 2e-6 relative (r <= 5.8), at words that reach every
// octant and its edges, the smallest and largest u1, and 200k Philox draws.
TEST(NormalPair, AgreesWithLibmBoxMuller) {
  auto reference = [](uint32_t w0, uint32_t w1, double* z0, double* z1) {
    const double u1 = (static_cast<double>(w0 >> 8) + 1.0) / 16777216.0;
    const double u2 = static_cast<double>(w1 >> 8) / 16777216.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    *z0 = r * std::cos(6.283185307179586 * u2);
    *z1 = r * std::sin(6.283185307179586 * u2);
  };
  double worst = 0;
  auto check = [&](uint32_t w0, uint32_t w1) {
    float z0, z1;
    double r0, r1;
    normal_pair(w0, w1, &z0, &z1);
    reference(w0, w1, &r0, &r1);
    const double scale = std::max(1.0, std::sqrt(r0 * r0 + r1 * r1));
    worst = std::max({worst, std::fabs(z0 - r0) / scale, std::fabs(z1 - r1) / scale});
  };
  std::vector<uint32_t> w0s = {0u, 0xFFu, 0x100u, 0x7FFFFF00u, 0xB504F300u, 0xFFFFFE00u, 0xFFFFFFFFu};
  std::vector<uint32_t> w1s;
  for (uint32_t octant = 0; octant < 8; ++octant)
    for (uint32_t rem : {0u, 1u, 0x100000u, 0x1FFFFEu, 0x1FFFFFu}) w1s.push_back(((octant << 21) | rem) << 8);
  for (uint32_t w0 : w0s)
    for (uint32_t w1 : w1s) check(w0, w1);
  const Philox rng(11, 5);
  for (uint64_t b = 0; b < 100000; ++b) {
    const auto w = rng.block(b);
    check(w[0], w[1]);
    check(w[2], w[3]);
  }
  EXPECT_LT(worst, 2e-6);
  // u1 = 1 gives r = 0 exactly, and u2 = 0 the angle 0: (0, 0).
  float z0 = 1, z1 = 1;
  normal_pair(0xFFFFFFFFu, 0u, &z0, &z1);
  EXPECT_EQ(z0, 0.0f);
  EXPECT_EQ(z1, 0.0f);
}

}  // namespace
}  // namespace zt
