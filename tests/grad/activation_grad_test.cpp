// gelu / silu / swiglu forward and backward against double references and central finite
// differences; overwrite rule, in-place aliasing, strided swiglu halves.
#include <cmath>
#include <random>

#include "common/grad_check.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/activation.h"

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

// HF "gelu_new" / GPT-2, literally.
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
template <class F>
std::vector<double> map(const std::vector<double>& x, F f) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

// Inputs covering the interesting range plus a few extremes.
std::vector<float> act_inputs(int n, uint32_t seed) {
  auto x = randn(static_cast<size_t>(n), seed, 2.5f);
  const float special[] = {0.0f, -0.0f, 1e-4f, -1e-4f, 8.0f, -8.0f, 3.0f, -3.0f, 15.0f, -15.0f};
  for (size_t i = 0; i < std::size(special) && i < x.size(); ++i) x[i] = special[i];
  return x;
}

using FwdFn = void (*)(const zt::Tensor&, const zt::Tensor&);
using BwdFn = void (*)(const zt::Tensor&, const zt::Tensor&, const zt::Tensor&);

void check_unary(const char* name, FwdFn fwd, BwdFn bwd, double (*ref)(double)) {
  const int N = 5, C = 7;
  const auto x = act_inputs(N * C, 11), wl = randn(N * C, 12);
  OwnedTensor tx = make(x, {N, C}), out({N, C}, DType::F32);
  fwd(out, tx);
  const auto xd = to_d(x), wld = to_d(wl);
  const double ef = max_rel_error(to_d(out->to_f32_vector()), map(xd, ref), 1e-6);
  EXPECT_LT(ef, 1e-5) << name;

  OwnedTensor dout = make(wl, {N, C}), dinp = make(randn(N * C, 13), {N, C});
  bwd(dinp, dout, tx);
  auto L = [&](const std::vector<double>& v) { return dot(map(v, ref), wld); };
  const double eb = max_rel_error(to_d(dinp->to_f32_vector()), numeric_gradient(L, xd), 1e-4);
  EXPECT_LT(eb, 1e-5) << name;
  std::printf("%s: fwd %.2e dinp %.2e\n", name, ef, eb);

  // In place: out aliases inp, dinp aliases dout.
  OwnedTensor y = make(x, {N, C});
  fwd(y, y);
  EXPECT_EQ(y->to_f32_vector(), out->to_f32_vector());
  OwnedTensor g = make(wl, {N, C});
  bwd(g, g, tx);
  EXPECT_EQ(g->to_f32_vector(), dinp->to_f32_vector());

  // Large tensor (parallel path) agrees with the small one element for element.
  const int n = 100003;
  const auto big = act_inputs(n, 14);
  OwnedTensor tb = make(big, {n}), ob({n}, DType::F32);
  fwd(ob, tb);
  const auto obv = ob->to_f32_vector();
  double worst = 0;
  for (int i = 0; i < n; ++i)
    worst = std::max(worst, std::fabs(obv[i] - ref(big[i])) / std::max(1e-6, std::fabs(ref(big[i]))));
  EXPECT_LT(worst, 1e-5) << name << " large";
}

TEST(ActivationGrad, Gelu) { check_unary("gelu", zt::ops::gelu_forward, zt::ops::gelu_backward, gelu_ref); }
TEST(ActivationGrad, Silu) { check_unary("silu", zt::ops::silu_forward, zt::ops::silu_backward, silu_ref); }

TEST(ActivationGrad, GeluNonFinitePropagates) {
  OwnedTensor x = make({NAN, INFINITY}, {2}), y({2}, DType::F32);
  zt::ops::gelu_forward(y, x);
  EXPECT_TRUE(std::isnan(y->get_f32(0)));
  EXPECT_EQ(y->get_f32(1), INFINITY);
}

std::vector<double> swiglu_ref(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> y(g.size());
  for (size_t i = 0; i < g.size(); ++i) y[i] = silu_ref(g[i]) * u[i];
  return y;
}

TEST(ActivationGrad, SwiGLU) {
  const int N = 5, F = 7;
  const auto g = act_inputs(N * F, 21), u = randn(N * F, 22), wl = randn(N * F, 23);
  OwnedTensor tg = make(g, {N, F}), tu = make(u, {N, F}), out({N, F}, DType::F32);
  zt::ops::swiglu_forward(out, tg, tu);
  const auto gd = to_d(g), ud = to_d(u), wld = to_d(wl);
  const double ef = max_rel_error(to_d(out->to_f32_vector()), swiglu_ref(gd, ud), 1e-6);
  EXPECT_LT(ef, 1e-5);
  OwnedTensor dout = make(wl, {N, F}), dg = make(randn(N * F, 24), {N, F}), du = make(randn(N * F, 25), {N, F});
  zt::ops::swiglu_backward(dg, du, dout, tg, tu);
  auto Lg = [&](const std::vector<double>& v) { return dot(swiglu_ref(v, ud), wld); };
  auto Lu = [&](const std::vector<double>& v) { return dot(swiglu_ref(gd, v), wld); };
  const double eg = max_rel_error(to_d(dg->to_f32_vector()), numeric_gradient(Lg, gd), 1e-4);
  const double eu = max_rel_error(to_d(du->to_f32_vector()), numeric_gradient(Lu, ud), 1e-4);
  EXPECT_LT(eg, 1e-5);
  EXPECT_LT(eu, 1e-5);
  std::printf("swiglu: fwd %.2e dgate %.2e dup %.2e\n", ef, eg, eu);

  // gate and up as the two column halves of one fused [N, 2F] buffer, and dgate/dup the two
  // halves of another: same results as the contiguous tensors.
  OwnedTensor fused({N, 2 * F}, DType::F32), dfused({N, 2 * F}, DType::F32);
  const zt::Tensor fg = fused->narrow(1, 0, F), fu = fused->narrow(1, F, F);
  fg.copy_from(tg);
  fu.copy_from(tu);
  OwnedTensor out2({N, F}, DType::F32);
  zt::ops::swiglu_forward(out2, fg, fu);
  EXPECT_EQ(out2->to_f32_vector(), out->to_f32_vector());
  zt::ops::swiglu_backward(dfused->narrow(1, 0, F), dfused->narrow(1, F, F), dout, fg, fu);
  EXPECT_EQ(dfused->narrow(1, 0, F).to_f32_vector(), dg->to_f32_vector());
  EXPECT_EQ(dfused->narrow(1, F, F).to_f32_vector(), du->to_f32_vector());
}

TEST(ActivationGrad, SizeMismatchIsABug) {
  OwnedTensor a({4}, DType::F32), b({5}, DType::F32);
  EXPECT_THROW(zt::ops::gelu_forward(a, b), zt::Error);
}

}  // namespace
