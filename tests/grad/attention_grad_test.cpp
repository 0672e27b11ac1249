// Causal GQA attention: forward (out and lse) against a naive double T x T softmax
// reference, backward against central finite differences of that reference.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/grad_check.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace zt {
namespace {

struct AttnCase {
  int64_t B, T, Hq, Hkv, D;
  int64_t row() const { return (Hq + 2 * Hkv) * D; }
  Shape qkv_shape() const { return {B, T, row()}; }
  Shape out_shape() const { return {B, T, Hq * D}; }
};

// Naive reference: full T x T scores, causal mask, softmax, GQA head mapping.
void attention_ref(const std::vector<double>& qkv, const AttnCase& c, double scale, std::vector<double>* out,
                   std::vector<double>* lse) {
  out->assign(static_cast<size_t>(c.B * c.T * c.Hq * c.D), 0.0);
  if (lse) lse->assign(static_cast<size_t>(c.B * c.Hq * c.T), 0.0);
  const int64_t row = c.row();
  std::vector<double> s(static_cast<size_t>(c.T));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t g = h / (c.Hq / c.Hkv);
      for (int64_t i = 0; i < c.T; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.T; ++j) {
          if (j > i) {
            s[static_cast<size_t>(j)] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d)
            dot += qkv[static_cast<size_t>((b * c.T + i) * row + h * c.D + d)] *
                   qkv[static_cast<size_t>((b * c.T + j) * row + (c.Hq + g) * c.D + d)];
          s[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[static_cast<size_t>(j)] - mx);
        if (lse) (*lse)[static_cast<size_t>((b * c.Hq + h) * c.T + i)] = mx + std::log(sum);
        for (int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - mx) / sum;
          for (int64_t d = 0; d < c.D; ++d)
            (*out)[static_cast<size_t>((b * c.T + i) * c.Hq * c.D + h * c.D + d)] +=
                p * qkv[static_cast<size_t>((b * c.T + j) * row + (c.Hq + c.Hkv + g) * c.D + d)];
        }
      }
    }
}

// Max abs error relative to the largest reference magnitude: f32 rounding of values that
// come from cancellation is ~1e-7 of the scale, not of the value itself.
double scaled_error(const std::vector<double>& a, const std::vector<double>& ref) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return worst / std::max(scale, 1e-30);
}

std::vector<double> random_vec(size_t n, std::mt19937& rng, double sd) {
  std::normal_distribution<double> dist(0.0, sd);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<float>(dist(rng));
  return v;
}

OwnedTensor to_tensor(const std::vector<double>& v, const Shape& shape) {
  OwnedTensor t(shape, DType::F32);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

std::vector<double> to_vec(const Tensor& t) {
  const std::vector<float> f = t.to_f32_vector();
  return std::vector<double>(f.begin(), f.end());
}

// Runs forward + backward; returns the analytic dqkv.
std::vector<double> run_op(const AttnCase& c, const std::vector<double>& x, const std::vector<double>& w, float scale,
                           std::vector<double>* out, std::vector<double>* lse) {
  OwnedTensor qkv = to_tensor(x, c.qkv_shape());
  OwnedTensor o(c.out_shape(), DType::F32);
  OwnedTensor l({c.B, c.Hq, c.T}, DType::F32);
  ops::attention_forward(o, l, qkv, static_cast<int>(c.Hq), static_cast<int>(c.Hkv), scale);
  OwnedTensor dout = to_tensor(w, c.out_shape());
  OwnedTensor dqkv(c.qkv_shape(), DType::F32);
  dqkv->fill_f32(12345.0f);  // must be overwritten everywhere
  ops::attention_backward(dqkv, dout, qkv, o, l, static_cast<int>(c.Hq), static_cast<int>(c.Hkv), scale);
  if (out) *out = to_vec(o);
  if (lse) *lse = to_vec(l);
  return to_vec(dqkv);
}

void run_case(const AttnCase& c, double sd = 1.0, bool fd = true) {
  std::mt19937 rng(static_cast<unsigned>(c.B * 1000 + c.T * 100 + c.Hq * 10 + c.Hkv));
  const size_t n = static_cast<size_t>(shape_numel(c.qkv_shape()));
  const std::vector<double> x = random_vec(n, rng, sd);
  const std::vector<double> w = random_vec(static_cast<size_t>(shape_numel(c.out_shape())), rng, 1.0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));

  std::vector<double> out, lse, ref_out, ref_lse;
  const std::vector<double> ana = run_op(c, x, w, scale, &out, &lse);
  attention_ref(x, c, scale, &ref_out, &ref_lse);
  const double out_err = scaled_error(out, ref_out);
  const double lse_err = scaled_error(lse, ref_lse);
  EXPECT_LT(out_err, 1e-5) << "out";
  EXPECT_LT(lse_err, 1e-5) << "lse";

  double bwd_err = 0;
  if (fd) {
    auto loss = [&](const std::vector<double>& xx) {
      std::vector<double> o;
      attention_ref(xx, c, scale, &o, nullptr);
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
      return s;
    };
    const std::vector<double> num = testing::numeric_gradient(loss, x);
    bwd_err = scaled_error(ana, num);
    EXPECT_LT(bwd_err, 1e-5) << "dqkv";
  }
  std::printf("attention B=%lld T=%lld Hq=%lld Hkv=%lld D=%lld: out %.2e lse %.2e dqkv %.2e\n",
              static_cast<long long>(c.B), static_cast<long long>(c.T), static_cast<long long>(c.Hq),
              static_cast<long long>(c.Hkv), static_cast<long long>(c.D), out_err, lse_err, bwd_err);
}

TEST(AttentionGrad, Gqa) { run_case({2, 5, 4, 2, 8}); }
TEST(AttentionGrad, MultiHead) { run_case({2, 5, 3, 3, 8}); }
TEST(AttentionGrad, MultiQuery) { run_case({2, 5, 4, 1, 8}); }
TEST(AttentionGrad, SingleStep) { run_case({2, 1, 4, 2, 8}); }
TEST(AttentionGrad, OddHeadDim) { run_case({1, 6, 2, 1, 5}); }
// More than one query block (64 rows), and sharp softmaxes.
TEST(AttentionGrad, SeveralBlocks) { run_case({1, 70, 2, 1, 4}, 2.0); }
TEST(AttentionGrad, LongForwardOnly) { run_case({2, 200, 4, 2, 16}, 1.0, false); }

// The backward has two schedules (per kv head, or per query head with partial sums when
// there are more threads than batch x kv heads); both must give the same gradient.
TEST(AttentionGrad, ThreadCountsAgree) {
  const AttnCase c{1, 67, 4, 1, 8};
  std::mt19937 rng(99);
  const std::vector<double> x = random_vec(static_cast<size_t>(shape_numel(c.qkv_shape())), rng, 1.0);
  const std::vector<double> w = random_vec(static_cast<size_t>(shape_numel(c.out_shape())), rng, 1.0);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<double> g1 = run_op(c, x, w, 0.35f, nullptr, nullptr);
  omp_set_num_threads(4);
  const std::vector<double> g4 = run_op(c, x, w, 0.35f, nullptr, nullptr);
  omp_set_num_threads(saved);
  EXPECT_LT(scaled_error(g1, g4), 1e-5);
  // And the per-query-head schedule against finite differences.
  omp_set_num_threads(4);
  auto loss = [&](const std::vector<double>& xx) {
    std::vector<double> o;
    attention_ref(xx, c, 0.35f, &o, nullptr);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
    return s;
  };
  omp_set_num_threads(saved);
  EXPECT_LT(scaled_error(g4, testing::numeric_gradient(loss, x)), 1e-5);
}

TEST(AttentionGrad, RejectsBadShapes) {
  OwnedTensor qkv({1, 4, 8 * 8}, DType::F32);
  OwnedTensor out({1, 4, 4 * 8}, DType::F32);
  OwnedTensor lse({1, 4, 4}, DType::F32);
  EXPECT_NO_THROW(ops::attention_forward(out, lse, qkv, 4, 2, 0.5f));
  EXPECT_THROW(ops::attention_forward(out, lse, qkv, 3, 2, 0.5f), Error);  // Hq % Hkv != 0
  OwnedTensor bad_lse({1, 4, 5}, DType::F32);
  EXPECT_THROW(ops::attention_forward(out, bad_lse, qkv, 4, 2, 0.5f), Error);
}

}  // namespace
}  // namespace zt
