#include "core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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
      const float want = 0.5f + 0.02f * rng.normal(static_cast<uint64_t>(i));
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

}  // namespace
}  // namespace zt
