// ops::gemm on the CPU backend against a double-precision reference: every transpose pair,
// = and +=, alpha, operands and out as column windows of wider matrices (the columns
// outside out's window must stay untouched), 16-bit operands and outs, empty K.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/gemm.h"

namespace {

using zt::DType;
using zt::GradWrite;
using zt::OwnedTensor;
using zt::Tensor;
using zt::Transpose;
using zt::testing::make;
using zt::testing::randn;

// A [rows, cols] window at column `first` of a [rows, cols + extra] matrix of random values.
struct Window {
  OwnedTensor wide;
  Tensor view;
  std::vector<float> values;  // the wide matrix's values as stored (after rounding to dt)
  int64_t ld = 0, first = 0;
};

Window window(int64_t rows, int64_t cols, int64_t first, int64_t extra, DType dt, uint32_t seed) {
  Window w;
  w.ld = cols + extra;
  w.first = first;
  w.wide = make(randn(static_cast<size_t>(rows * w.ld), seed), {rows, w.ld}, dt);
  w.values = w.wide->to_f32_vector();
  w.view = w.wide->narrow(1, first, cols);
  return w;
}

float at(const Window& w, int64_t r, int64_t c) { return w.values[static_cast<size_t>(r * w.ld + w.first + c)]; }

struct Case {
  Transpose ta, tb;
  GradWrite write;
  float alpha;
  DType a_dt, b_dt, out_dt;
};

void run_case(const Case& k) {
  const int64_t M = 5, N = 7, K = 3;
  const bool at_ = k.ta == Transpose::Yes, bt = k.tb == Transpose::Yes;
  const Window a = window(at_ ? K : M, at_ ? M : K, 2, 3, k.a_dt, 1);
  const Window b = window(bt ? N : K, bt ? K : N, 1, 2, k.b_dt, 2);
  const Window out = window(M, N, 3, 4, k.out_dt, 3);
  zt::ops::gemm(out.view, a.view, k.ta, b.view, k.tb, k.alpha, k.write);
  const std::vector<float> got = out.wide->to_f32_vector();
  const bool wide16 = k.out_dt != DType::F32;
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t c = 0; c < out.ld; ++c) {
      const float g = got[static_cast<size_t>(r * out.ld + c)];
      const float old = out.values[static_cast<size_t>(r * out.ld + c)];
      if (c < out.first || c >= out.first + N) {
        EXPECT_EQ(g, old) << "column " << c << " outside out's window changed";
        continue;
      }
      double want = 0;
      for (int64_t i = 0; i < K; ++i)
        want += static_cast<double>(at_ ? at(a, i, r) : at(a, r, i)) *
                static_cast<double>(bt ? at(b, c - out.first, i) : at(b, i, c - out.first));
      want *= k.alpha;
      if (k.write == GradWrite::Accumulate) want += old;
      EXPECT_NEAR(g, want, (wide16 ? 1e-2 : 1e-5) * std::max(1.0, std::fabs(want)))
          << "row " << r << " column " << c;
    }
  }
}

TEST(Gemm, EveryTransposeWriteAndAlphaOnStridedWindowsF32) {
  for (Transpose ta : {Transpose::No, Transpose::Yes})
    for (Transpose tb : {Transpose::No, Transpose::Yes})
      for (GradWrite w : {GradWrite::Overwrite, GradWrite::Accumulate})
        for (float alpha : {1.0f, -0.375f}) {
          SCOPED_TRACE(testing::Message() << "ta " << int(ta) << " tb " << int(tb) << " write " << int(w) << " alpha "
                                          << alpha);
          run_case({ta, tb, w, alpha, DType::F32, DType::F32, DType::F32});
        }
}

TEST(Gemm, SixteenBitOperandsAndOutsRoundOnce) {
  for (GradWrite w : {GradWrite::Overwrite, GradWrite::Accumulate}) {
    run_case({Transpose::No, Transpose::Yes, w, 2.0f, DType::BF16, DType::BF16, DType::BF16});
    run_case({Transpose::Yes, Transpose::No, w, 0.5f, DType::BF16, DType::BF16, DType::F32});
    run_case({Transpose::No, Transpose::No, w, 1.0f, DType::F32, DType::F16, DType::F16});
  }
}

TEST(Gemm, EmptyInnerDimensionWritesZerosOrKeepsOut) {
  OwnedTensor a = make({}, {3, 0}), b = make({}, {0, 2});
  OwnedTensor out = make({1, 2, 3, 4, 5, 6}, {3, 2});
  zt::ops::gemm(out, a, Transpose::No, b, Transpose::No, 1.0f, GradWrite::Accumulate);
  EXPECT_EQ(out->to_f32_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  zt::ops::gemm(out, a, Transpose::No, b, Transpose::No, 1.0f, GradWrite::Overwrite);
  EXPECT_EQ(out->to_f32_vector(), (std::vector<float>(6, 0.0f)));
}

TEST(Gemm, MismatchedShapesAndColumnStridesAreRefused) {
  OwnedTensor a = make(randn(6, 1), {2, 3}), b = make(randn(8, 2), {4, 2}), out = make(randn(4, 3), {2, 2});
  EXPECT_THROW(zt::ops::gemm(out, a, Transpose::No, b, Transpose::No), zt::Error);  // K 3 against 4
  OwnedTensor b3 = make(randn(6, 2), {3, 2});
  zt::ops::gemm(out, a, Transpose::No, b3, Transpose::No);  // fine
  const Tensor column_strided(a->data(), {2, 2}, {3, 2}, DType::F32, zt::Device::cpu(), "a");
  EXPECT_THROW(zt::ops::gemm(out, column_strided, Transpose::No, make(randn(4, 3), {2, 2}), Transpose::No),
               zt::Error);
}

}  // namespace
