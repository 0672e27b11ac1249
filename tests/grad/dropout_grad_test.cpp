// dropout_forward / dropout_backward: p = 0 copies, the mask is Philox(seed, stream) and
// identical across calls and thread counts, keep rate ~ 1-p, kept values scaled by
// 1/(1-p), backward applies the same mask.
#include <omp.h>

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/dropout.h"

namespace {
using zt::DType;
using zt::OwnedTensor;

OwnedTensor randn_tensor(int64_t n, uint32_t seed) {
  OwnedTensor t({n}, DType::F32);
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = d(gen);
    if (p[i] == 0.0f) p[i] = 1.0f;  // nonzero, so zeros in the output mark dropped elements
  }
  return t;
}

TEST(Dropout, ZeroPIsIdentity) {
  OwnedTensor x = randn_tensor(1001, 1), y({1001}, DType::F32);
  const zt::Philox rng(42, 7);
  zt::ops::dropout_forward(y, x, 0.0f, rng);
  EXPECT_EQ(y->to_f32_vector(), x->to_f32_vector());
  zt::ops::dropout_backward(y, x, 0.0f, rng);
  EXPECT_EQ(y->to_f32_vector(), x->to_f32_vector());
}

TEST(Dropout, MatchesPhiloxDefinition) {
  for (int64_t n : {1, 3, 4, 5, 37}) {
    const float p = 0.3f;
    OwnedTensor x = randn_tensor(n, 2), y({n}, DType::F32);
    const zt::Philox rng(1234, 99);
    zt::ops::dropout_forward(y, x, p, rng);
    for (int64_t i = 0; i < n; ++i) {
      const float expect = rng.uniform(static_cast<uint64_t>(i)) >= p ? x->get_f32(i) * (1.0f / (1.0f - p)) : 0.0f;
      EXPECT_EQ(y->get_f32(i), expect) << i;
    }
  }
}

TEST(Dropout, MaskStableAcrossCallsAndThreads) {
  const int64_t n = 1 << 20;
  const float p = 0.1f;
  OwnedTensor x = randn_tensor(n, 3);
  const zt::Philox rng(2024, 5);
  std::vector<float> first;
  for (int threads : {1, 2, 4, 1}) {
    omp_set_num_threads(threads);
    OwnedTensor y({n}, DType::F32);
    zt::ops::dropout_forward(y, x, p, rng);
    if (first.empty())
      first = y->to_f32_vector();
    else
      EXPECT_EQ(y->to_f32_vector(), first) << threads << " threads";
  }
  omp_set_num_threads(omp_get_num_procs());
  // A different stream gives a different mask.
  OwnedTensor y2({n}, DType::F32);
  zt::ops::dropout_forward(y2, x, p, zt::Philox(2024, 6));
  EXPECT_NE(y2->to_f32_vector(), first);
}

TEST(Dropout, KeepRateAndScale) {
  const int64_t n = 1 << 21;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    OwnedTensor x = randn_tensor(n, 4), y({n}, DType::F32);
    zt::ops::dropout_forward(y, x, p, zt::Philox(77, 1));
    int64_t kept = 0;
    const float* xv = x.data<float>();
    const float* yv = y.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (yv[i] != 0.0f) {
        ++kept;
        ASSERT_EQ(yv[i], xv[i] * (1.0f / (1.0f - p)));
      }
    }
    const double rate = static_cast<double>(kept) / static_cast<double>(n);
    const double sigma = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
    EXPECT_NEAR(rate, 1.0 - p, 5 * sigma) << "p=" << p;
  }
}

TEST(Dropout, BackwardUsesSameMaskAndMayAlias) {
  const int64_t n = 100003;
  const float p = 0.25f;
  const zt::Philox rng(9, 3);
  OwnedTensor x = randn_tensor(n, 5), y({n}, DType::F32);
  zt::ops::dropout_forward(y, x, p, rng);
  OwnedTensor dout = randn_tensor(n, 6), dinp({n}, DType::F32);
  zt::ops::dropout_backward(dinp, dout, p, rng);
  for (int64_t i = 0; i < n; ++i) {
    const bool kept = y.data<float>()[i] != 0.0f;
    ASSERT_EQ(dinp.data<float>()[i], kept ? dout.data<float>()[i] * (1.0f / (1.0f - p)) : 0.0f) << i;
  }
  // In place (dinp aliases dout) gives the same result.
  zt::ops::dropout_backward(dout, dout, p, rng);
  EXPECT_EQ(dout->to_f32_vector(), dinp->to_f32_vector());
  // Forward in place too.
  zt::ops::dropout_forward(x, x, p, rng);
  EXPECT_EQ(x->to_f32_vector(), y->to_f32_vector());
}

TEST(Dropout, BadProbabilityIsABug) {
  OwnedTensor x({4}, DType::F32);
  EXPECT_THROW(zt::ops::dropout_forward(x, x, 1.0f, zt::Philox(1, 1)), zt::Error);
  EXPECT_THROW(zt::ops::dropout_forward(x, x, -0.1f, zt::Philox(1, 1)), zt::Error);
}

}  // namespace
