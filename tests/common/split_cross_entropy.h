// A small LM-head problem for the split cross-entropy tests (unit, comm, cuda): inputs,
// a head with padding rows, targets with ignored rows, and the fused op's results.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/make_tensor.h"
#include "common/random.h"
#include "core/tensor.h"
#include "ops/cross_entropy.h"

namespace zt::testing {

constexpr int kCeIgnore = -100;

struct CeProblem {
  int64_t N = 0, C = 0, V = 0, Vp = 0;
  OwnedTensor inp, weight, targets;
};

// N rows of width C, a vocabulary of V tokens padded to Vp rows; every 5th row ignored.
inline CeProblem ce_problem(int64_t N, int64_t C, int64_t V, int64_t Vp, DType weight_dtype = DType::F32) {
  CeProblem p{N,
              C,
              V,
              Vp,
              make(randn(static_cast<size_t>(N * C), 3), {N, C}),
              make(randn(static_cast<size_t>(Vp * C), 4, 0.5f), {Vp, C}, weight_dtype),
              make_ids({}, {0})};
  std::vector<int32_t> t(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    t[static_cast<size_t>(i)] = i % 5 == 4 ? kCeIgnore : static_cast<int32_t>((i * 37) % V);
  p.targets = make_ids(t, {N});
  return p;
}

struct CeResult {
  std::vector<float> losses, dinp, dweight;
  double loss_sum = 0.0;
};

// The fused op: per-row losses, then dinp and dweight (from zero) of grad_scale * loss sum.
inline CeResult fused_cross_entropy(const CeProblem& p, float grad_scale) {
  CeResult r;
  OwnedTensor losses({p.N}, DType::F32), dinp({p.N, p.C}, DType::F32);
  OwnedTensor dweight = OwnedTensor::zeros({p.Vp, p.C}, p.weight->dtype());
  r.loss_sum = ops::lm_head_cross_entropy_forward(p.inp, p.weight, p.targets, p.V, kCeIgnore, losses).loss_sum;
  ops::lm_head_cross_entropy_forward_backward(dinp, dweight, p.inp, p.weight, p.targets, p.V, kCeIgnore, grad_scale);
  r.losses = losses->to_f32_vector();
  r.dinp = dinp->to_f32_vector();
  r.dweight = dweight->to_f32_vector();
  return r;
}

// max |got - want| / max |want|.
// The mean loss's gradient scale: 1 / the targets that count.
inline float grad_scale_of(const CeProblem& p) {
  int64_t count = 0;
  for (int64_t i = 0; i < p.N; ++i) count += p.targets.data<int32_t>()[i] != kCeIgnore;
  return 1.0f / static_cast<float>(count);
}

inline double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::fabs(static_cast<double>(want[i])));
  }
  return got.size() != want.size() ? INFINITY : (den > 0.0 ? num / den : num);
}

inline double sum_of(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += x;
  return s;
}

}  // namespace zt::testing
