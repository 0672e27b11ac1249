// linear_forward / linear_backward against a double-precision reference and central
// finite differences; accumulation rule; bf16/f16 weights; thread-count determinism.
#include <omp.h>

#include <random>

#include "common/grad_check.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/linear.h"

namespace {
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::testing::dot;
using zt::testing::err;
using zt::testing::make;
using zt::testing::max_rel_error;
using zt::testing::numeric_gradient;
using zt::testing::randn;
using zt::testing::to_d;

// out[n, o] = sum_i x[n, i] w[o, i] + b[o]
std::vector<double> ref_forward(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>* b, int N, int I, int O) {
  std::vector<double> out(static_cast<size_t>(N * O));
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int i = 0; i < I; ++i) s += x[n * I + i] * w[o * I + i];
      out[n * O + o] = s;
    }
  return out;
}

struct Case {
  int N, I, O;
  bool bias;
};

class LinearGrad : public ::testing::TestWithParam<Case> {};

TEST_P(LinearGrad, ForwardAndFiniteDifferences) {
  const auto [N, I, O, has_bias] = GetParam();
  const auto x = randn(N * I, 1), w = randn(O * I, 2, 0.5f), b = randn(O, 3), wl = randn(N * O, 4);
  OwnedTensor tx = make(x, {N, I}), tw = make(w, {O, I}), tb = make(b, {O}), tout({N, O}, DType::F32);
  const zt::Tensor bias = has_bias ? tb.view() : zt::Tensor{};
  zt::ops::linear_forward(tout, tx, tw, bias);

  const auto xd = to_d(x), wd = to_d(w), bd = to_d(b), wld = to_d(wl);
  const auto ref = ref_forward(xd, wd, has_bias ? &bd : nullptr, N, I, O);
  const auto out = tout->to_f32_vector();
  const double fwd_err = err(to_d(out), ref);
  EXPECT_LT(fwd_err, 1e-5);

  // Backward with L = sum(out * wl): dout = wl. Param grads start from nonzero values.
  const auto g0w = randn(O * I, 5), g0b = randn(O, 6);
  OwnedTensor tdout = make(wl, {N, O}), tdinp = make(randn(N * I, 7), {N, I});
  OwnedTensor tdw = make(g0w, {O, I}), tdb = make(g0b, {O});
  zt::ops::linear_backward(tdinp, tdw, has_bias ? tdb.view() : zt::Tensor{}, tdout, tx, tw);

  auto L_x = [&](const std::vector<double>& v) {
    return dot(ref_forward(v, wd, has_bias ? &bd : nullptr, N, I, O), wld);
  };
  auto L_w = [&](const std::vector<double>& v) {
    return dot(ref_forward(xd, v, has_bias ? &bd : nullptr, N, I, O), wld);
  };
  auto L_b = [&](const std::vector<double>& v) { return dot(ref_forward(xd, wd, &v, N, I, O), wld); };

  const double ex = err(to_d(tdinp->to_f32_vector()), numeric_gradient(L_x, xd));
  auto dw = tdw->to_f32_vector();
  for (size_t i = 0; i < dw.size(); ++i) dw[i] -= g0w[i];
  const double ew = err(to_d(dw), numeric_gradient(L_w, wd));
  EXPECT_LT(ex, 1e-5) << "dinp";
  EXPECT_LT(ew, 1e-5) << "dweight";
  double eb = 0;
  if (has_bias) {
    auto db = tdb->to_f32_vector();
    for (size_t i = 0; i < db.size(); ++i) db[i] -= g0b[i];
    eb = err(to_d(db), numeric_gradient(L_b, bd));
    EXPECT_LT(eb, 1e-5) << "dbias";
  } else {
    EXPECT_EQ(tdb->to_f32_vector(), g0b);  // untouched
  }
  std::printf("linear N=%d I=%d O=%d bias=%d: fwd %.2e dinp %.2e dw %.2e db %.2e\n", N, I, O, has_bias, fwd_err, ex, ew,
              eb);

  // Activation gradient is overwritten: a second backward gives the same dinp, param grads add again.
  const auto dinp1 = tdinp->to_f32_vector();
  const auto dw1 = tdw->to_f32_vector();
  zt::ops::linear_backward(tdinp, tdw, zt::Tensor{}, tdout, tx, tw);
  EXPECT_EQ(tdinp->to_f32_vector(), dinp1);
  const auto dw2 = tdw->to_f32_vector();
  for (size_t i = 0; i < dw2.size(); ++i) EXPECT_NEAR(dw2[i] - dw1[i], dw1[i] - g0w[i], 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearGrad,
                         ::testing::Values(Case{5, 7, 3, true}, Case{5, 7, 3, false}, Case{1, 1, 1, true},
                                           Case{6, 9, 11, true}, Case{17, 33, 13, true}));

template <class Fn>
void for_half_dtypes(Fn&& fn) {
  fn(DType::BF16);
  fn(DType::F16);
}

TEST(Linear, HalfWeightsMatchF32OnRoundedWeights) {
  for_half_dtypes([](DType dt) {
    const int N = 7, I = 13, O = 5;
    const auto x = randn(N * I, 11), wl = randn(N * O, 14);
    // The f32 reference uses the weights after rounding to dt.
    OwnedTensor w_half = make(randn(O * I, 12, 0.5f), {O, I}, dt), b_half = make(randn(O, 13), {O}, dt);
    const auto w = w_half->to_f32_vector(), b = b_half->to_f32_vector();
    OwnedTensor w32 = make(w, {O, I}), b32 = make(b, {O}), tx = make(x, {N, I});
    OwnedTensor out_half({N, O}, DType::F32), out32({N, O}, DType::F32);
    zt::ops::linear_forward(out_half, tx, w_half, b_half);
    zt::ops::linear_forward(out32, tx, w32, b32);
    EXPECT_LT(max_rel_error(to_d(out_half->to_f32_vector()), to_d(out32->to_f32_vector()), 1e-6), 1e-5);

    // Gradients: half-precision dweight/dbias = round(g0 + f32 gradient).
    OwnedTensor tdout = make(wl, {N, O});
    OwnedTensor dinp_half({N, I}, DType::F32), dinp32({N, I}, DType::F32);
    OwnedTensor dw_half = make(randn(O * I, 15), {O, I}, dt), db_half = make(randn(O, 16), {O}, dt);
    const auto g0w = dw_half->to_f32_vector(), g0b = db_half->to_f32_vector();
    OwnedTensor dw32 = OwnedTensor::zeros({O, I}, DType::F32), db32 = OwnedTensor::zeros({O}, DType::F32);
    zt::ops::linear_backward(dinp_half, dw_half, db_half, tdout, tx, w_half);
    zt::ops::linear_backward(dinp32, dw32, db32, tdout, tx, w32);
    EXPECT_LT(max_rel_error(to_d(dinp_half->to_f32_vector()), to_d(dinp32->to_f32_vector()), 1e-6), 1e-5);
    const auto gw = dw32->to_f32_vector(), gb = db32->to_f32_vector();
    const auto hw = dw_half->to_f32_vector(), hb = db_half->to_f32_vector();
    for (size_t i = 0; i < gw.size(); ++i) {
      float expect = g0w[i] + gw[i];
      zt::convert(&expect, DType::F32, &expect, DType::F32, 1);
      OwnedTensor e = make({expect}, {1}, dt);
      EXPECT_EQ(hw[i], e->get_f32(0)) << zt::dtype_name(dt) << " dweight " << i;
    }
    for (size_t i = 0; i < gb.size(); ++i) {
      OwnedTensor e = make({g0b[i] + gb[i]}, {1}, dt);
      EXPECT_EQ(hb[i], e->get_f32(0)) << zt::dtype_name(dt) << " dbias " << i;
    }
  });
}

TEST(Linear, F32WeightHalfGradients) {
  // A bf16 gradient buffer for an f32 weight (grad dtype chosen by the caller).
  const int N = 4, I = 6, O = 3;
  OwnedTensor tx = make(randn(N * I, 21), {N, I}), tw = make(randn(O * I, 22), {O, I});
  OwnedTensor tdout = make(randn(N * O, 23), {N, O});
  OwnedTensor dw16 = OwnedTensor::zeros({O, I}, DType::BF16), dw32 = OwnedTensor::zeros({O, I}, DType::F32);
  zt::ops::linear_backward(zt::Tensor{}, dw16, zt::Tensor{}, tdout, tx, tw);
  zt::ops::linear_backward(zt::Tensor{}, dw32, zt::Tensor{}, tdout, tx, tw);
  const auto a = dw16->to_f32_vector(), b = dw32->to_f32_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], zt::to_f32(zt::to_bf16(b[i])));
}

TEST(Linear, LeadingDimsAndDeterminism) {
  const int B = 3, T = 37, I = 64, O = 300;
  OwnedTensor tx = make(randn(B * T * I, 31), {B, T, I}), tw = make(randn(O * I, 32), {O, I});
  OwnedTensor tb = make(randn(O, 33), {O}), tdout = make(randn(B * T * O, 34), {B, T, O});
  std::vector<float> ref_db;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    OwnedTensor db = OwnedTensor::zeros({O}, DType::F32), out({B, T, O}, DType::F32);
    zt::ops::linear_forward(out, tx, tw, tb);
    zt::ops::linear_backward(zt::Tensor{}, zt::Tensor{}, db, tdout, tx, tw);
    if (ref_db.empty())
      ref_db = db->to_f32_vector();
    else
      EXPECT_EQ(db->to_f32_vector(), ref_db) << threads << " threads";
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST(Linear, ShapeMismatchIsABug) {
  OwnedTensor tx({2, 5}, DType::F32), tw({3, 4}, DType::F32), out({2, 3}, DType::F32);
  EXPECT_THROW(zt::ops::linear_forward(out, tx, tw, zt::Tensor{}), zt::Error);
}

}  // namespace

// GPT-2's Conv1D layout: a weight stored [I, O] gives the same forward and gradients as
// its transpose stored [O, I] (the dweight comes out in the stored layout).
TEST(LinearGrad, InOutLayoutMatchesTheTransposedOutInWeight) {
  const int64_t N = 9, I = 13, O = 7;
  zt::OwnedTensor x({N, I}, zt::DType::F32), w_oi({O, I}, zt::DType::F32), w_io({I, O}, zt::DType::F32),
      b({O}, zt::DType::F32), dout({N, O}, zt::DType::F32);
  zt::fill_normal(x, zt::Philox(1, 1), 0.0f, 1.0f);
  zt::fill_normal(w_oi, zt::Philox(1, 2), 0.0f, 1.0f);
  zt::fill_normal(b, zt::Philox(1, 3), 0.0f, 1.0f);
  zt::fill_normal(dout, zt::Philox(1, 4), 0.0f, 1.0f);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) w_io->set_f32(i * O + o, w_oi->get_f32(o * I + i));
  zt::OwnedTensor y1({N, O}, zt::DType::F32), y2({N, O}, zt::DType::F32);
  zt::ops::linear_forward(y1, x, w_oi, b);
  zt::ops::linear_forward(y2, x, w_io, b, zt::WeightLayout::InOut);
  for (int64_t k = 0; k < N * O; ++k) EXPECT_NEAR(y1->get_f32(k), y2->get_f32(k), 1e-5f);
  zt::OwnedTensor dx1({N, I}, zt::DType::F32), dx2({N, I}, zt::DType::F32);
  zt::OwnedTensor dw_oi = zt::OwnedTensor::zeros({O, I}, zt::DType::F32),
                  dw_io = zt::OwnedTensor::zeros({I, O}, zt::DType::F32);
  zt::OwnedTensor db1 = zt::OwnedTensor::zeros({O}, zt::DType::F32), db2 = zt::OwnedTensor::zeros({O}, zt::DType::F32);
  zt::ops::linear_backward(dx1, dw_oi, db1, dout, x, w_oi);
  zt::ops::linear_backward(dx2, dw_io, db2, dout, x, w_io, zt::WeightLayout::InOut);
  for (int64_t k = 0; k < N * I; ++k) EXPECT_NEAR(dx1->get_f32(k), dx2->get_f32(k), 1e-5f);
  for (int64_t o = 0; o < O; ++o) {
    EXPECT_NEAR(db1->get_f32(o), db2->get_f32(o), 1e-5f);
    for (int64_t i = 0; i < I; ++i) EXPECT_NEAR(dw_oi->get_f32(o * I + i), dw_io->get_f32(i * O + o), 1e-5f);
  }
  // bf16 gradient accumulation in the InOut layout goes through the f32 scratch path.
  zt::OwnedTensor dw_bf = zt::OwnedTensor::zeros({I, O}, zt::DType::BF16);
  zt::ops::linear_backward(zt::Tensor(), dw_bf, zt::Tensor(), dout, x, w_io, zt::WeightLayout::InOut);
  for (int64_t k = 0; k < I * O; ++k) EXPECT_EQ(dw_bf->get_f32(k), zt::to_f32(zt::to_bf16(dw_io->get_f32(k))));
}
