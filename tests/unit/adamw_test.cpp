// AdamW update against a double-precision transcription of torch.optim.AdamW, for f32
// parameters and for bf16 parameters with an f32 master copy; decay skipped for biases.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "ops/optimizer.h"

using namespace zt;

namespace {
struct RefState {
  std::vector<double> p, m, v;
};
void reference_adamw(RefState& s, const std::vector<double>& g, const ops::AdamWHyper& h) {
  const double bc1 = 1 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  for (size_t i = 0; i < s.p.size(); ++i) {
    double gi = g[i] * h.grad_scale;
    if (h.decay == AdamDecay::L2) gi += h.weight_decay * s.p[i];
    if (h.decay == AdamDecay::Decoupled) s.p[i] *= 1 - static_cast<double>(h.lr) * h.weight_decay;
    s.m[i] = h.beta1 * s.m[i] + (1 - static_cast<double>(h.beta1)) * gi;
    s.v[i] = h.beta2 * s.v[i] + (1 - static_cast<double>(h.beta2)) * gi * gi;
    s.p[i] -= (h.lr / bc1) * s.m[i] / (std::sqrt(s.v[i]) / std::sqrt(bc2) + h.eps);
  }
}
}  // namespace

TEST(AdamW, MatchesTorchFormulaOverSeveralSteps) {
  for (AdamDecay decay : {AdamDecay::Decoupled, AdamDecay::L2}) {
    const int64_t n = 1000;
    OwnedTensor p({n}, DType::F32), g({n}, DType::F32), m = OwnedTensor::zeros({n}, DType::F32),
                                                        v = OwnedTensor::zeros({n}, DType::F32);
    fill_normal(p, Philox(1, 1), 0.0f, 1.0f);
    RefState ref{std::vector<double>(n), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
    for (int64_t i = 0; i < n; ++i) ref.p[i] = p->get_f32(i);
    ops::AdamWHyper h;
    h.lr = 1e-2f;
    h.weight_decay = 0.1f;
    h.decay = decay;
    h.grad_scale = 0.5f;
    for (int64_t step = 1; step <= 5; ++step) {
      fill_normal(g, Philox(2, static_cast<uint64_t>(step)), 0.0f, 1.0f);
      std::vector<double> gd(n);
      for (int64_t i = 0; i < n; ++i) gd[i] = g->get_f32(i);
      h.step = step;
      ops::adamw_step(p, Tensor(), g, m, v, h);
      reference_adamw(ref, gd, h);
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(p->get_f32(i), ref.p[i], 2e-6 * (1 + std::fabs(ref.p[i]))) << i;
  }
}

TEST(AdamW, Bf16ParameterFollowsItsF32Master) {
  const int64_t n = 257;
  OwnedTensor p({n}, DType::BF16), master({n}, DType::F32), g({n}, DType::BF16),
      m = OwnedTensor::zeros({n}, DType::F32), v = OwnedTensor::zeros({n}, DType::F32);
  fill_normal(master, Philox(3, 1), 0.0f, 1.0f);
  p->copy_from(master);
  master->copy_from(p);  // start from representable values
  fill_normal(g, Philox(3, 2), 0.0f, 1.0f);
  ops::AdamWHyper h;
  h.lr = 1e-3f;
  ops::adamw_step(p, master, g, m, v, h);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(p->get_f32(i), to_f32(to_bf16(master->get_f32(i))));
  }
  // A 16-bit parameter without a master copy is refused.
  EXPECT_THROW(ops::adamw_step(p, Tensor(), g, m, v, h), Error);
}
