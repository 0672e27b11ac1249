// RoPE: frequencies against transformers' formulas (values computed with torch 1.13 by
// transformers' code, and a plain double implementation), tables, forward against the
// explicit rotate_half formula in double, backward against finite differences, and
// backward as the inverse of forward.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/grad_check.h"
#include "core/tensor.h"
#include "ops/rope.h"

namespace zt {
namespace {

using ops::RopeConfig;
using ops::RopeScaling;

// transformers' default + llama3 frequency formulas, in double.
std::vector<double> inv_freq_ref(const RopeConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv[static_cast<size_t>(i)] = 1.0 / std::pow(double(c.theta), 2.0 * i / c.head_dim);
  const RopeScaling& s = c.scaling;
  if (s.type == RopeScaling::Type::Linear) {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == RopeScaling::Type::Llama3) {
    const double old_ctx = s.original_max_position_embeddings;
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f /= s.factor;
        continue;
      }
      const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

RopeConfig llama31_config() {
  RopeConfig c;
  c.head_dim = 128;
  c.theta = 500000.0f;
  c.scaling.type = RopeScaling::Type::Llama3;
  c.scaling.factor = 8.0f;
  c.scaling.low_freq_factor = 1.0f;
  c.scaling.high_freq_factor = 4.0f;
  c.scaling.original_max_position_embeddings = 8192;
  return c;
}

// A small config whose 4 frequencies (1, 0.1, 0.01, 0.001; wavelengths 6.3 .. 6283) fall
// in all three llama3 regimes: high (kept), medium (smoothed) and low (divided).
RopeConfig small_llama3_config() {
  RopeConfig c;
  c.head_dim = 8;
  c.theta = 10000.0f;
  c.scaling.type = RopeScaling::Type::Llama3;
  c.scaling.factor = 8.0f;
  c.scaling.low_freq_factor = 1.0f;
  c.scaling.high_freq_factor = 4.0f;
  c.scaling.original_max_position_embeddings = 1024;
  return c;
}

TEST(RopeGrad, InvFreqDefault) {
  RopeConfig c;
  c.head_dim = 8;
  c.theta = 10000.0f;
  const std::vector<float> inv = ops::rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 4u);
  // torch: 1 / 10000 ** (arange(0, 8, 2).float() / 8)
  const float expected[4] = {0x1p+0f, 0x1.99999ap-4f, 0x1.47ae14p-7f, 0x1.0624dep-10f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(inv[i], expected[i]) << i;
}

TEST(RopeGrad, InvFreqLlama3MatchesTransformers) {
  const RopeConfig c = llama31_config();
  const std::vector<float> inv = ops::rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 64u);
  // transformers' _compute_llama3_parameters on torch 1.13 (f32), Llama 3.1 rope_scaling.
  const float torch_values[64] = {
      0x1p+0f,         0x1.a11582p-1f,  0x1.53c38cp-1f,  0x1.14c708p-1f,  0x1.c2ef78p-2f,  0x1.6f56fap-2f,
      0x1.2b3dc6p-2f,  0x1.e788c2p-3f,  0x1.8d276p-3f,   0x1.43874p-3f,   0x1.078d4p-3f,   0x1.ad6338p-4f,
      0x1.5dc95ap-4f,  0x1.1cf13p-4f,   0x1.d03ccep-5f,  0x1.7a2d08p-5f,  0x1.34119p-5f,   0x1.f5ea7ep-6f,
      0x1.98de92p-6f,  0x1.4d1272p-6f,  0x1.0f5386p-6f,  0x1.ba0dd8p-7f,  0x1.681adap-7f,  0x1.2558fep-7f,
      0x1.ddee9ep-8f,  0x1.8554ecp-8f,  0x1.3d2804p-8f,  0x1.025c6ap-8f,  0x1.a4ee4p-9f,   0x1.1bfa0cp-9f,
      0x1.67a23ap-10f, 0x1.c12f3cp-11f, 0x1.132ba4p-11f, 0x1.47e21p-12f,  0x1.765ba4p-13f, 0x1.90d10cp-14f,
      0x1.46831ap-14f, 0x1.09fb7ep-14f, 0x1.b15902p-15f, 0x1.610332p-15f, 0x1.1f91fp-15f,  0x1.d484dep-16f,
      0x1.7da9e8p-16f, 0x1.36e8eap-16f, 0x1.fa8b86p-17f, 0x1.9ca3eap-17f, 0x1.5024d6p-17f, 0x1.11d41ep-17f,
      0x1.be2188p-18f, 0x1.6b6d0ep-18f, 0x1.280d96p-18f, 0x1.e257p-19f,   0x1.88ec2p-19f,  0x1.4014d2p-19f,
      0x1.04be68p-19f, 0x1.a8d01p-20f,  0x1.5a0f4ep-20f, 0x1.19e8p-20f,   0x1.cb4a9ap-21f, 0x1.76258ep-21f,
      0x1.30c94ep-21f, 0x1.f09184p-22f, 0x1.94836p-22f,  0x1.4985fep-22f};
  const std::vector<double> ref = inv_freq_ref(c);
  int exact = 0;
  for (int i = 0; i < 64; ++i) {
    // torch's pow may differ from a correctly rounded one by an ulp.
    EXPECT_NEAR(inv[i], torch_values[i], 2.5e-7 * torch_values[i]) << i;
    exact += inv[i] == torch_values[i];
    EXPECT_NEAR(inv[i], ref[static_cast<size_t>(i)], 2e-6 * ref[static_cast<size_t>(i)]) << i;
  }
  EXPECT_GE(exact, 60);
  // Hand-checked: i = 0 is high frequency (kept as 1); i = 63 is low frequency:
  // 500000^(-126/128) / 8 = exp(-0.984375 * ln 500000) / 8 = 3.068926e-07.
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[63], 3.068926e-07, 1e-12);
  // i = 31 is medium: f = 500000^(-62/128) = 1.736047e-3, wavelen = 2 pi / f = 3619.25,
  // smooth = (8192 / 3619.25 - 1) / 3 = 0.421151, inv = (1 - s) f / 8 + s f = 8.567514e-4.
  const double f31 = std::pow(500000.0, -62.0 / 128.0);
  const double s31 = (8192.0 / (2 * M_PI / f31) - 1.0) / 3.0;
  EXPECT_NEAR(s31, 0.421151, 1e-6);
  EXPECT_NEAR(inv[31], 8.567514e-4, 1e-10);
  EXPECT_NEAR(inv[31], (1 - s31) * f31 / 8 + s31 * f31, 1e-6 * f31);
}

TEST(RopeGrad, InvFreqLinear) {
  RopeConfig c;
  c.head_dim = 16;
  c.theta = 10000.0f;
  c.scaling.type = RopeScaling::Type::Linear;
  c.scaling.factor = 2.0f;
  const std::vector<float> inv = ops::rope_inv_freq(c);
  const float torch_values[8] = {0x1p-1f,        0x1.43d136p-3f, 0x1.99999ap-5f,  0x1.030dc6p-6f,
                                 0x1.47ae14p-8f, 0x1.9e7c7p-10f, 0x1.0624dep-11f, 0x1.4b96cp-13f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(inv[i], torch_values[i]) << i;
}

TEST(RopeGrad, TableMatchesFormula) {
  const RopeConfig c = llama31_config();
  const ops::RopeTable table = ops::make_rope_table(c, 100);
  ASSERT_EQ(table.cos->shape(), (Shape{100, 64}));
  const std::vector<float> inv = ops::rope_inv_freq(c);
  for (int p : {0, 1, 7, 99}) {
    for (int i = 0; i < 64; ++i) {
      const double angle = double(float(p) * inv[i]);
      EXPECT_NEAR(table.cos->get_f32(p * 64 + i), std::cos(angle), 1e-7) << p << " " << i;
      EXPECT_NEAR(table.sin->get_f32(p * 64 + i), std::sin(angle), 1e-7) << p << " " << i;
    }
  }
}

struct RopeCase {
  int64_t B, T, Hq, Hkv;
};

// The explicit formula in double: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin per head of
// q and k; v unchanged.
std::vector<double> rope_ref(const std::vector<double>& x, const RopeCase& rc, const RopeConfig& c) {
  const std::vector<double> inv = inv_freq_ref(c);
  const int64_t D = c.head_dim, half = D / 2;
  const int64_t row = (rc.Hq + 2 * rc.Hkv) * D;
  std::vector<double> y = x;
  for (int64_t b = 0; b < rc.B; ++b)
    for (int64_t t = 0; t < rc.T; ++t)
      for (int64_t h = 0; h < rc.Hq + rc.Hkv; ++h) {
        const int64_t off = (b * rc.T + t) * row + h * D;
        for (int64_t i = 0; i < half; ++i) {
          const double a = t * inv[static_cast<size_t>(i)];
          const double x1 = x[static_cast<size_t>(off + i)], x2 = x[static_cast<size_t>(off + i + half)];
          y[static_cast<size_t>(off + i)] = x1 * std::cos(a) - x2 * std::sin(a);
          y[static_cast<size_t>(off + i + half)] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
  return y;
}

std::vector<double> random_vec(size_t n, std::mt19937& rng) {
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<float>(dist(rng));  // representable in f32
  return v;
}

void run_rope_case(const RopeCase& rc, const RopeConfig& c) {
  std::mt19937 rng(1234);
  const int64_t D = c.head_dim;
  const Shape shape{rc.B, rc.T, (rc.Hq + 2 * rc.Hkv) * D};
  const size_t n = static_cast<size_t>(shape_numel(shape));
  const std::vector<double> x = random_vec(n, rng);
  const std::vector<double> w = random_vec(n, rng);
  const ops::RopeTable table = ops::make_rope_table(c, static_cast<int>(rc.T) + 3);

  OwnedTensor qkv(shape, DType::F32);
  for (size_t i = 0; i < n; ++i) qkv.data<float>()[i] = static_cast<float>(x[i]);
  ops::rope_forward_inplace(qkv, static_cast<int>(rc.Hq), static_cast<int>(rc.Hkv), table);
  const std::vector<double> y = rope_ref(x, rc, c);
  std::vector<double> got(n);
  for (size_t i = 0; i < n; ++i) got[i] = qkv.data<float>()[i];
  const double fwd_err = testing::max_rel_error(got, y);
  EXPECT_LT(fwd_err, 1e-4) << "forward";  // (relative, floor 1e-3: ~1e-7 absolute)

  // v heads untouched, bit for bit.
  const int64_t row = shape[2];
  for (int64_t r = 0; r < rc.B * rc.T; ++r)
    for (int64_t k = (rc.Hq + rc.Hkv) * D; k < row; ++k)
      ASSERT_EQ(qkv.data<float>()[r * row + k], static_cast<float>(x[static_cast<size_t>(r * row + k)]));

  // Backward against finite differences of L = sum(rope(x) * w).
  auto loss = [&](const std::vector<double>& xx) {
    const std::vector<double> yy = rope_ref(xx, rc, c);
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += yy[i] * w[i];
    return s;
  };
  const std::vector<double> num = testing::numeric_gradient(loss, x);
  OwnedTensor dqkv(shape, DType::F32);
  for (size_t i = 0; i < n; ++i) dqkv.data<float>()[i] = static_cast<float>(w[i]);
  ops::rope_backward_inplace(dqkv, static_cast<int>(rc.Hq), static_cast<int>(rc.Hkv), table);
  std::vector<double> ana(n);
  for (size_t i = 0; i < n; ++i) ana[i] = dqkv.data<float>()[i];
  const double bwd_err = testing::max_rel_error(ana, num);
  EXPECT_LT(bwd_err, 1e-4) << "backward";

  // Backward is the inverse of forward.
  ops::rope_backward_inplace(qkv, static_cast<int>(rc.Hq), static_cast<int>(rc.Hkv), table);
  double inv_err = 0;
  for (size_t i = 0; i < n; ++i) inv_err = std::max(inv_err, std::fabs(qkv.data<float>()[i] - x[i]));
  EXPECT_LT(inv_err, 1e-5) << "inverse";
  std::printf("rope B=%lld T=%lld Hq=%lld Hkv=%lld D=%lld: fwd %.2e bwd %.2e inverse %.2e\n",
              static_cast<long long>(rc.B), static_cast<long long>(rc.T), static_cast<long long>(rc.Hq),
              static_cast<long long>(rc.Hkv), static_cast<long long>(D), fwd_err, bwd_err, inv_err);
}

TEST(RopeGrad, ForwardBackwardDefault) {
  RopeConfig c;
  c.head_dim = 8;
  c.theta = 10000.0f;
  run_rope_case({2, 5, 4, 2}, c);
  run_rope_case({2, 5, 3, 3}, c);
  run_rope_case({1, 7, 4, 1}, c);
}

TEST(RopeGrad, ForwardBackwardLlama3) { run_rope_case({2, 5, 4, 2}, small_llama3_config()); }

TEST(RopeGrad, ForwardBackwardLinear) {
  RopeConfig c;
  c.head_dim = 6;
  c.theta = 500.0f;
  c.scaling.type = RopeScaling::Type::Linear;
  c.scaling.factor = 4.0f;
  run_rope_case({2, 9, 2, 1}, c);
}

TEST(RopeGrad, LongSequenceInverse) {
  // Large positions: forward then backward still returns the input.
  const RopeConfig c = llama31_config();
  const ops::RopeTable table = ops::make_rope_table(c, 4096);
  const Shape shape{1, 4096, 3 * 128};
  OwnedTensor qkv(shape, DType::F32);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> x(static_cast<size_t>(shape_numel(shape)));
  for (float& v : x) v = dist(rng);
  for (size_t i = 0; i < x.size(); ++i) qkv.data<float>()[i] = x[i];
  ops::rope_forward_inplace(qkv, 1, 1, table);
  ops::rope_backward_inplace(qkv, 1, 1, table);
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i) err = std::max(err, double(std::fabs(qkv.data<float>()[i] - x[i])));
  EXPECT_LT(err, 1e-5);
}

TEST(RopeGrad, RejectsBadShapes) {
  RopeConfig c;
  c.head_dim = 8;
  const ops::RopeTable table = ops::make_rope_table(c, 4);
  OwnedTensor wrong({1, 4, 7 * 8}, DType::F32);  // 7 heads != 4 + 2 * 1
  EXPECT_THROW(ops::rope_forward_inplace(wrong, 4, 1, table), Error);
  OwnedTensor too_long({1, 5, 6 * 8}, DType::F32);
  EXPECT_THROW(ops::rope_forward_inplace(too_long, 4, 1, table), Error);
}

}  // namespace
}  // namespace zt
