// layernorm / rmsnorm forward and backward against a double-precision reference and
// central finite differences; accumulation rule; bf16/f16 weights; thread-count determinism.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/grad_check.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/norm.h"

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

std::vector<float> minus(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] -= b[i];
  return a;
}

constexpr double kEps = 1e-5;

// LayerNorm in double; mean/rstd out-params optional.
std::vector<double> ref_layernorm(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>* b, int N, int C, std::vector<double>* mean = nullptr,
                                  std::vector<double>* rstd = nullptr) {
  std::vector<double> out(x.size());
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    const double r = 1.0 / std::sqrt(v + kEps);
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - m) * r * w[c] + (b ? (*b)[c] : 0.0);
    if (mean) mean->push_back(m);
    if (rstd) rstd->push_back(r);
  }
  return out;
}

std::vector<double> ref_rmsnorm(const std::vector<double>& x, const std::vector<double>& w, int N, int C,
                                std::vector<double>* rstd = nullptr) {
  std::vector<double> out(x.size());
  for (int n = 0; n < N; ++n) {
    double s = 0;
    for (int c = 0; c < C; ++c) s += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(s / C + kEps);
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * r * w[c];
    if (rstd) rstd->push_back(r);
  }
  return out;
}

// C = 1 and C = 2 are left out: LayerNorm's output there is (nearly) constant and its
// gradient is pure rounding noise amplified by rstd = 1/sqrt(eps).
struct Case {
  int N, C;
  bool bias;
};
class NormGrad : public ::testing::TestWithParam<Case> {};

TEST_P(NormGrad, LayerNorm) {
  const auto [N, C, has_bias] = GetParam();
  // Inputs with a nonzero mean and unequal scales per row.
  auto x = randn(N * C, 101, 1.5f);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) x[n * C + c] += 2.0f * std::sin(static_cast<float>(n)) - 0.5f;
  const auto w = randn(C, 102), b = randn(C, 103), wl = randn(N * C, 104);
  OwnedTensor tx = make(x, {N, C}), tw = make(w, {C}), tb = make(b, {C});
  OwnedTensor out({N, C}, DType::F32), mean({N}, DType::F32), rstd({N}, DType::F32);
  const zt::Tensor bias = has_bias ? tb.view() : zt::Tensor{};
  zt::ops::layernorm_forward(out, mean, rstd, tx, tw, bias, static_cast<float>(kEps));

  const auto xd = to_d(x), wd = to_d(w), bd = to_d(b), wld = to_d(wl);
  std::vector<double> rm, rr;
  const auto ref = ref_layernorm(xd, wd, has_bias ? &bd : nullptr, N, C, &rm, &rr);
  const double ef = err(to_d(out->to_f32_vector()), ref);
  EXPECT_LT(ef, 1e-5);
  EXPECT_LT(max_rel_error(to_d(mean->to_f32_vector()), rm, 1e-6), 1e-5);
  EXPECT_LT(max_rel_error(to_d(rstd->to_f32_vector()), rr, 1e-6), 1e-5);

  const auto g0w = randn(C, 105), g0b = randn(C, 106);
  OwnedTensor dout = make(wl, {N, C}), dinp = make(randn(N * C, 107), {N, C});
  OwnedTensor dw = make(g0w, {C}), db = make(g0b, {C});
  zt::ops::layernorm_backward(dinp, dw, has_bias ? db.view() : zt::Tensor{}, dout, tx, tw, mean, rstd);

  const std::vector<double>* bp = has_bias ? &bd : nullptr;
  auto Lx = [&](const std::vector<double>& v) { return dot(ref_layernorm(v, wd, bp, N, C), wld); };
  auto Lw = [&](const std::vector<double>& v) { return dot(ref_layernorm(xd, v, bp, N, C), wld); };
  auto Lb = [&](const std::vector<double>& v) { return dot(ref_layernorm(xd, wd, &v, N, C), wld); };
  const double ex = err(to_d(dinp->to_f32_vector()), numeric_gradient(Lx, xd));
  const double ew = err(to_d(minus(dw->to_f32_vector(), g0w)), numeric_gradient(Lw, wd));
  EXPECT_LT(ex, 1e-5) << "dinp";
  EXPECT_LT(ew, 1e-5) << "dweight";
  double eb = 0;
  if (has_bias) {
    eb = err(to_d(minus(db->to_f32_vector(), g0b)), numeric_gradient(Lb, bd));
    EXPECT_LT(eb, 1e-5) << "dbias";
  } else {
    EXPECT_EQ(db->to_f32_vector(), g0b);
  }
  std::printf("layernorm N=%d C=%d bias=%d: fwd %.2e dinp %.2e dw %.2e db %.2e\n", N, C, has_bias, ef, ex, ew, eb);

  // dinp is overwritten, dweight accumulates; dinp may alias dout.
  const auto dinp1 = dinp->to_f32_vector(), dw1 = dw->to_f32_vector();
  zt::ops::layernorm_backward(dinp, dw, zt::Tensor{}, dout, tx, tw, mean, rstd);
  EXPECT_EQ(dinp->to_f32_vector(), dinp1);
  const auto dw2 = dw->to_f32_vector();
  for (int c = 0; c < C; ++c) EXPECT_NEAR(dw2[c] - dw1[c], dw1[c] - g0w[c], 1e-5);
  OwnedTensor inplace = make(wl, {N, C});
  zt::ops::layernorm_backward(inplace, zt::Tensor{}, zt::Tensor{}, inplace, tx, tw, mean, rstd);
  EXPECT_EQ(inplace->to_f32_vector(), dinp1);
}

TEST_P(NormGrad, RMSNorm) {
  const auto [N, C, unused] = GetParam();
  (void)unused;
  const auto x = randn(N * C, 201, 1.5f), w = randn(C, 202), wl = randn(N * C, 204);
  OwnedTensor tx = make(x, {N, C}), tw = make(w, {C});
  OwnedTensor out({N, C}, DType::F32), rstd({N}, DType::F32);
  zt::ops::rmsnorm_forward(out, rstd, tx, tw, static_cast<float>(kEps));
  const auto xd = to_d(x), wd = to_d(w), wld = to_d(wl);
  std::vector<double> rr;
  const auto ref = ref_rmsnorm(xd, wd, N, C, &rr);
  const double ef = err(to_d(out->to_f32_vector()), ref);
  EXPECT_LT(ef, 1e-5);
  EXPECT_LT(max_rel_error(to_d(rstd->to_f32_vector()), rr, 1e-6), 1e-5);

  const auto g0w = randn(C, 205);
  OwnedTensor dout = make(wl, {N, C}), dinp = make(randn(N * C, 207), {N, C}), dw = make(g0w, {C});
  zt::ops::rmsnorm_backward(dinp, dw, dout, tx, tw, rstd);
  auto Lx = [&](const std::vector<double>& v) { return dot(ref_rmsnorm(v, wd, N, C), wld); };
  auto Lw = [&](const std::vector<double>& v) { return dot(ref_rmsnorm(xd, v, N, C), wld); };
  const double ex = err(to_d(dinp->to_f32_vector()), numeric_gradient(Lx, xd));
  const double ew = err(to_d(minus(dw->to_f32_vector(), g0w)), numeric_gradient(Lw, wd));
  EXPECT_LT(ex, 1e-5) << "dinp";
  EXPECT_LT(ew, 1e-5) << "dweight";
  std::printf("rmsnorm N=%d C=%d: fwd %.2e dinp %.2e dw %.2e\n", N, C, ef, ex, ew);

  const auto dinp1 = dinp->to_f32_vector(), dw1 = dw->to_f32_vector();
  zt::ops::rmsnorm_backward(dinp, dw, dout, tx, tw, rstd);
  EXPECT_EQ(dinp->to_f32_vector(), dinp1);
  const auto dw2 = dw->to_f32_vector();
  for (int c = 0; c < C; ++c) EXPECT_NEAR(dw2[c] - dw1[c], dw1[c] - g0w[c], 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormGrad,
                         ::testing::Values(Case{5, 7, true}, Case{5, 7, false}, Case{1, 3, true}, Case{2, 4, true},
                                           Case{9, 33, true}, Case{130, 5, true}, Case{4, 131, false}));

TEST(Norm, HalfWeightsMatchF32OnRoundedWeights) {
  for (DType dt : {DType::BF16, DType::F16}) {
    const int N = 6, C = 19;
    const auto x = randn(N * C, 301), wl = randn(N * C, 302);
    OwnedTensor wh = make(randn(C, 303), {C}, dt), bh = make(randn(C, 304), {C}, dt);
    OwnedTensor w32 = make(wh->to_f32_vector(), {C}), b32 = make(bh->to_f32_vector(), {C});
    OwnedTensor tx = make(x, {N, C}), dout = make(wl, {N, C});
    // LayerNorm.
    OwnedTensor oh({N, C}, DType::F32), o32({N, C}, DType::F32), mh({N}, DType::F32), rh({N}, DType::F32),
        m32({N}, DType::F32), r32({N}, DType::F32);
    zt::ops::layernorm_forward(oh, mh, rh, tx, wh, bh, 1e-5f);
    zt::ops::layernorm_forward(o32, m32, r32, tx, w32, b32, 1e-5f);
    EXPECT_LT(err(to_d(oh->to_f32_vector()), to_d(o32->to_f32_vector())), 1e-5);
    OwnedTensor dih({N, C}, DType::F32), di32({N, C}, DType::F32);
    OwnedTensor dwh = make(randn(C, 305), {C}, dt), dbh = make(randn(C, 306), {C}, dt);
    const auto g0w = dwh->to_f32_vector(), g0b = dbh->to_f32_vector();
    OwnedTensor dw32 = OwnedTensor::zeros({C}, DType::F32), db32 = OwnedTensor::zeros({C}, DType::F32);
    zt::ops::layernorm_backward(dih, dwh, dbh, dout, tx, wh, mh, rh);
    zt::ops::layernorm_backward(di32, dw32, db32, dout, tx, w32, m32, r32);
    EXPECT_LT(err(to_d(dih->to_f32_vector()), to_d(di32->to_f32_vector())), 1e-5);
    const auto gw = dw32->to_f32_vector(), gb = db32->to_f32_vector();
    const auto hw = dwh->to_f32_vector(), hb = dbh->to_f32_vector();
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(hw[c], make({g0w[c] + gw[c]}, {1}, dt)->get_f32(0)) << zt::dtype_name(dt);
      EXPECT_EQ(hb[c], make({g0b[c] + gb[c]}, {1}, dt)->get_f32(0)) << zt::dtype_name(dt);
    }
    // RMSNorm.
    zt::ops::rmsnorm_forward(oh, rh, tx, wh, 1e-6f);
    zt::ops::rmsnorm_forward(o32, r32, tx, w32, 1e-6f);
    EXPECT_LT(err(to_d(oh->to_f32_vector()), to_d(o32->to_f32_vector())), 1e-5);
    OwnedTensor dwh2 = OwnedTensor::zeros({C}, dt), dw322 = OwnedTensor::zeros({C}, DType::F32);
    zt::ops::rmsnorm_backward(dih, dwh2, dout, tx, wh, rh);
    zt::ops::rmsnorm_backward(di32, dw322, dout, tx, w32, r32);
    EXPECT_LT(err(to_d(dih->to_f32_vector()), to_d(di32->to_f32_vector())), 1e-5);
    const auto a = dwh2->to_f32_vector(), b = dw322->to_f32_vector();
    for (int c = 0; c < C; ++c) EXPECT_EQ(a[c], make({b[c]}, {1}, dt)->get_f32(0));
  }
}

TEST(Norm, ParamGradsIndependentOfThreadCount) {
  const int N = 1000, C = 300;
  OwnedTensor tx = make(randn(N * C, 401), {N, C}), tw = make(randn(C, 402), {C}), tb = make(randn(C, 403), {C});
  OwnedTensor dout = make(randn(N * C, 404), {N, C});
  OwnedTensor out({N, C}, DType::F32), mean({N}, DType::F32), rstd({N}, DType::F32), dinp({N, C}, DType::F32);
  std::vector<float> ref_w, ref_b, ref_x;
  for (int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    OwnedTensor dw = OwnedTensor::zeros({C}, DType::F32), db = OwnedTensor::zeros({C}, DType::F32);
    zt::ops::layernorm_forward(out, mean, rstd, tx, tw, tb, 1e-5f);
    zt::ops::layernorm_backward(dinp, dw, db, dout, tx, tw, mean, rstd);
    if (ref_w.empty()) {
      ref_w = dw->to_f32_vector();
      ref_b = db->to_f32_vector();
      ref_x = dinp->to_f32_vector();
    } else {
      EXPECT_EQ(dw->to_f32_vector(), ref_w) << threads;
      EXPECT_EQ(db->to_f32_vector(), ref_b) << threads;
      EXPECT_EQ(dinp->to_f32_vector(), ref_x) << threads;
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

// GradWrite::Accumulate adds the input gradient to dinp (the residual stream's gradient)
// instead of overwriting it: old + the overwritten result, within an f32 rounding (the add
// may be fused into a multiply-add). An accumulated dinp may not alias dout.
TEST(Norm, AccumulatedDinpAddsToTheOldValue) {
  const int N = 37, C = 130;
  OwnedTensor tx = make(randn(N * C, 501, 1.5f), {N, C}), tw = make(randn(C, 502), {C}), tb = make(randn(C, 503), {C});
  OwnedTensor dout = make(randn(N * C, 504), {N, C});
  OwnedTensor out({N, C}, DType::F32), mean({N}, DType::F32), rstd({N}, DType::F32);
  const auto old = randn(N * C, 505);
  for (bool layernorm : {true, false}) {
    OwnedTensor fresh({N, C}, DType::F32), acc = make(old, {N, C});
    if (layernorm) {
      zt::ops::layernorm_forward(out, mean, rstd, tx, tw, tb, 1e-5f);
      zt::ops::layernorm_backward(fresh, zt::Tensor{}, zt::Tensor{}, dout, tx, tw, mean, rstd);
      zt::ops::layernorm_backward(acc, zt::Tensor{}, zt::Tensor{}, dout, tx, tw, mean, rstd, zt::GradWrite::Accumulate);
      EXPECT_THROW(zt::ops::layernorm_backward(dout, zt::Tensor{}, zt::Tensor{}, dout, tx, tw, mean, rstd,
                                               zt::GradWrite::Accumulate),
                   zt::Error);
    } else {
      zt::ops::rmsnorm_forward(out, rstd, tx, tw, 1e-5f);
      zt::ops::rmsnorm_backward(fresh, zt::Tensor{}, dout, tx, tw, rstd);
      zt::ops::rmsnorm_backward(acc, zt::Tensor{}, dout, tx, tw, rstd, zt::GradWrite::Accumulate);
      EXPECT_THROW(zt::ops::rmsnorm_backward(dout, zt::Tensor{}, dout, tx, tw, rstd, zt::GradWrite::Accumulate),
                   zt::Error);
    }
    const auto f = fresh->to_f32_vector(), a = acc->to_f32_vector();
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = old[i] + f[i];
      ASSERT_NEAR(a[i], want, 1e-6f * (1.0f + std::fabs(want))) << (layernorm ? "layernorm" : "rmsnorm") << " at " << i;
    }
  }
}

// The fused residual add + norm gives the bits of ops::add followed by the norm, also with
// res aliasing a (the residual stream updated in place).
TEST(Norm, AddNormIsAddThenNorm) {
  const int N = 9, C = 40;
  const auto av = randn(N * C, 601), bv = randn(N * C, 602);
  OwnedTensor tw = make(randn(C, 603), {C}), tb = make(randn(C, 604), {C});
  for (bool layernorm : {true, false})
    for (bool in_place : {false, true}) {
      OwnedTensor a = make(av, {N, C}), b = make(bv, {N, C}), res({N, C}, DType::F32), out({N, C}, DType::F32);
      OwnedTensor mean({N}, DType::F32), rstd({N}, DType::F32);
      OwnedTensor ref_res({N, C}, DType::F32), ref_out({N, C}, DType::F32), ref_mean({N}, DType::F32),
          ref_rstd({N}, DType::F32);
      zt::ops::add(ref_res, a, b);
      const zt::Tensor r = in_place ? a.view() : res.view();
      if (layernorm) {
        zt::ops::layernorm_forward(ref_out, ref_mean, ref_rstd, ref_res, tw, tb, 1e-5f);
        zt::ops::add_layernorm_forward(r, out, mean, rstd, a, b, tw, tb, 1e-5f);
        EXPECT_EQ(mean->to_f32_vector(), ref_mean->to_f32_vector());
      } else {
        zt::ops::rmsnorm_forward(ref_out, ref_rstd, ref_res, tw, 1e-5f);
        zt::ops::add_rmsnorm_forward(r, out, rstd, a, b, tw, 1e-5f);
      }
      EXPECT_EQ(r.to_f32_vector(), ref_res->to_f32_vector());
      EXPECT_EQ(out->to_f32_vector(), ref_out->to_f32_vector());
      EXPECT_EQ(rstd->to_f32_vector(), ref_rstd->to_f32_vector());
      EXPECT_THROW(zt::ops::add_rmsnorm_forward(res, res, rstd, a, b, tw, 1e-5f), zt::Error);  // out aliases res
    }
}

TEST(Norm, ShapeMismatchIsABug) {
  OwnedTensor tx({2, 5}, DType::F32), tw({4}, DType::F32), out({2, 5}, DType::F32), r({2}, DType::F32);
  EXPECT_THROW(zt::ops::rmsnorm_forward(out, r, tx, tw, 1e-5f), zt::Error);
}

}  // namespace
