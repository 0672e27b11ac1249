// Causal attention over packed samples (ops/attention.h's segment_starts): every sample of a
// packed row gives the out, lse and dqkv it gives when run alone as its own sequence, and
// the backward matches central finite differences of a double reference that masks across
// samples. Rows mix samples of 1 token, samples shorter and longer than the CPU kernel's
// 64-row blocks, and samples that start inside a block.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace zt {
namespace {

struct Packed {
  int64_t B, T, Hq, Hkv, D;
  std::vector<std::vector<int64_t>> lengths;  // per row: its samples' lengths (sum T)
  int64_t row() const { return (Hq + 2 * Hkv) * D; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
};

// segment_starts [B, T] from the rows' sample lengths.
OwnedTensor starts_of(const Packed& c) {
  OwnedTensor s({c.B, c.T}, DType::I32);
  int32_t* p = s.data<int32_t>();
  for (int64_t b = 0; b < c.B; ++b) {
    int64_t at = 0;
    for (int64_t len : c.lengths[static_cast<size_t>(b)]) {
      for (int64_t i = 0; i < len; ++i) p[b * c.T + at + i] = static_cast<int32_t>(at);
      at += len;
    }
    EXPECT_EQ(at, c.T) << "row " << b << " lengths must sum to T";
  }
  return s;
}

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

OwnedTensor tensor_of(const std::vector<float>& v, const Shape& shape) {
  OwnedTensor t(shape, DType::F32);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

struct Result {
  OwnedTensor out, lse, dqkv;
};

Result run(const Tensor& qkv, const Tensor& dout, int64_t B, int64_t T, const Packed& c, const Tensor& starts) {
  Result r{OwnedTensor({B, T, c.Hq * c.D}, DType::F32), OwnedTensor({B, c.Hq, T}, DType::F32),
           OwnedTensor({B, T, c.row()}, DType::F32)};
  r.dqkv->fill_f32(12345.0f);  // every element must be written
  const int hq = static_cast<int>(c.Hq), hkv = static_cast<int>(c.Hkv);
  ops::attention_forward(r.out, r.lse, qkv, hq, hkv, c.scale(), starts);
  ops::attention_backward(r.dqkv, dout, qkv, r.out, r.lse, hq, hkv, c.scale(), starts);
  return r;
}

// Rows [t0, t0 + n) of row b of a [B, T, W] tensor as a [1, n, W] copy.
OwnedTensor rows(const Tensor& x, int64_t b, int64_t t0, int64_t n) {
  const int64_t T = x.size(1), W = x.size(2);
  OwnedTensor out({1, n, W}, DType::F32);
  const float* src = x.data_as<float>() + (b * T + t0) * W;
  std::copy(src, src + n * W, out.data<float>());
  return out;
}

// max |a - b| / max |b|.
double scaled_error(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

// Each sample of the packed run against the same sample run alone.
void expect_samples_run_alone(const Packed& c) {
  const OwnedTensor starts = starts_of(c);
  const OwnedTensor qkv = tensor_of(randn(static_cast<size_t>(c.B * c.T * c.row()), 11), {c.B, c.T, c.row()});
  const OwnedTensor dout =
      tensor_of(randn(static_cast<size_t>(c.B * c.T * c.Hq * c.D), 12), {c.B, c.T, c.Hq * c.D});
  const Result packed = run(qkv, dout, c.B, c.T, c, starts);
  for (int64_t b = 0; b < c.B; ++b) {
    int64_t t0 = 0;
    for (int64_t n : c.lengths[static_cast<size_t>(b)]) {
      const Result alone = run(rows(qkv, b, t0, n), rows(dout, b, t0, n), 1, n, c, Tensor());
      EXPECT_LT(scaled_error(rows(packed.out, b, t0, n)->to_f32_vector(), alone.out->to_f32_vector()), 1e-6)
          << "out of row " << b << " sample at " << t0;
      EXPECT_LT(scaled_error(rows(packed.dqkv, b, t0, n)->to_f32_vector(), alone.dqkv->to_f32_vector()), 1e-6)
          << "dqkv of row " << b << " sample at " << t0;
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < n; ++i)
          EXPECT_NEAR(packed.lse.data<float>()[(b * c.Hq + h) * c.T + t0 + i],
                      alone.lse.data<float>()[h * n + i], 1e-5)
              << "lse of row " << b << " head " << h << " token " << t0 + i;
      t0 += n;
    }
  }
}

TEST(PackedAttention, EachSampleEqualsItsOwnRun) {
  // MHA and GQA; samples of 1, 3, 40, 63, 64, 65 and 130 tokens; a row that is one sample.
  expect_samples_run_alone({2, 200, 4, 4, 8, {{1, 63, 3, 130, 3}, {200}}});
  expect_samples_run_alone({3, 160, 4, 2, 16, {{40, 40, 40, 40}, {65, 64, 1, 30}, {1, 1, 158}}});
  expect_samples_run_alone({1, 130, 8, 1, 8, {{70, 60}}});  // MQA: the per-head partials' path
}

// Double reference with the sample mask; loss = sum(w * out).
double reference_loss(const std::vector<double>& qkv, const std::vector<double>& w, const Packed& c,
                      const int32_t* starts) {
  const int64_t row = c.row();
  double loss = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t g = h / (c.Hq / c.Hkv);
      for (int64_t i = 0; i < c.T; ++i) {
        const int64_t lo = starts[b * c.T + i];
        std::vector<double> s(static_cast<size_t>(i - lo + 1));
        double mx = -INFINITY;
        for (int64_t j = lo; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d)
            dot += qkv[static_cast<size_t>((b * c.T + i) * row + h * c.D + d)] *
                   qkv[static_cast<size_t>((b * c.T + j) * row + (c.Hq + g) * c.D + d)];
          s[static_cast<size_t>(j - lo)] = dot * c.scale();
          mx = std::max(mx, s[static_cast<size_t>(j - lo)]);
        }
        double sum = 0;
        for (double v : s) sum += std::exp(v - mx);
        for (int64_t j = lo; j <= i; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j - lo)] - mx) / sum;
          for (int64_t d = 0; d < c.D; ++d)
            loss += w[static_cast<size_t>((b * c.T + i) * c.Hq * c.D + h * c.D + d)] * p *
                    qkv[static_cast<size_t>((b * c.T + j) * row + (c.Hq + c.Hkv + g) * c.D + d)];
        }
      }
    }
  return loss;
}

TEST(PackedAttention, BackwardMatchesFiniteDifferences) {
  const Packed c{2, 9, 4, 2, 4, {{3, 1, 5}, {9}}};
  const OwnedTensor starts = starts_of(c);
  const std::vector<float> x = randn(static_cast<size_t>(c.B * c.T * c.row()), 21);
  const std::vector<float> w = randn(static_cast<size_t>(c.B * c.T * c.Hq * c.D), 22);
  const OwnedTensor qkv = tensor_of(x, {c.B, c.T, c.row()});
  const Result r = run(qkv, tensor_of(w, {c.B, c.T, c.Hq * c.D}), c.B, c.T, c, starts);
  const std::vector<float> ana = r.dqkv->to_f32_vector();
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end());
  const double eps = 1e-4;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < xd.size(); ++i) {
    const double keep = xd[i];
    xd[i] = keep + eps;
    const double up = reference_loss(xd, wd, c, starts.data<int32_t>());
    xd[i] = keep - eps;
    const double down = reference_loss(xd, wd, c, starts.data<int32_t>());
    xd[i] = keep;
    const double fd = (up - down) / (2 * eps);
    worst = std::max(worst, std::fabs(fd - ana[i]));
    scale = std::max(scale, std::fabs(fd));
  }
  EXPECT_LT(worst / scale, 1e-4) << "max |analytic - finite difference| / max |fd|";
}

TEST(PackedAttention, InvalidSegmentStartsAreBadInput) {
  const Packed c{1, 4, 2, 1, 4, {{4}}};
  OwnedTensor qkv({1, 4, c.row()}, DType::F32), out({1, 4, 8}, DType::F32), lse({1, 2, 4}, DType::F32);
  qkv->fill_f32(0.5f);
  OwnedTensor s({1, 4}, DType::I32);
  const auto with = [&](std::vector<int32_t> v) {
    std::copy(v.begin(), v.end(), s.data<int32_t>());
    ops::attention_forward(out, lse, qkv, 2, 1, c.scale(), s);
  };
  EXPECT_NO_THROW(with({0, 0, 2, 3}));
  EXPECT_THROW(with({1, 1, 2, 3}), Error);  // the first token starts its sample
  EXPECT_THROW(with({0, 0, 1, 1}), Error);  // 1 is neither 2 nor the previous start
  EXPECT_THROW(with({0, 0, 3, 3}), Error);  // a start after the token
  OwnedTensor wrong({1, 3}, DType::I32);
  EXPECT_THROW(ops::attention_forward(out, lse, qkv, 2, 1, c.scale(), wrong), Error);
}

}  // namespace
}  // namespace zt
