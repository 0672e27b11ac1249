// The split LM-head cross-entropy (ops/cross_entropy.h: partial, rescale, finish,
// backward; parallel/vocab_parallel_cross_entropy.h) against the fused op on the CPU: the
// whole vocabulary on one rank, and the vocabulary cut into slices combined by hand (the
// group's max and sums) - per-row losses, loss sum, dinp and dweight to f32 tolerance.
// Ignored rows, padding rows, an empty slice (padding only) and a bf16 head.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/split_cross_entropy.h"
#include "core/error.h"
#include "ops/cross_entropy.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace zt {
namespace {

using testing::CeProblem;
using testing::CeResult;
using testing::grad_scale_of;
using testing::kCeIgnore;
using testing::max_rel;

void expect_matches(const CeResult& got, const CeResult& want, double tol) {
  EXPECT_LE(max_rel(got.losses, want.losses), tol) << "losses";
  EXPECT_LE(std::fabs(got.loss_sum - want.loss_sum) / std::fabs(want.loss_sum), tol) << "loss sum";
  EXPECT_LE(max_rel(got.dinp, want.dinp), tol) << "dinp";
  EXPECT_LE(max_rel(got.dweight, want.dweight), tol) << "dweight";
}

// The vocabulary split over `ranks` slices computed one after another, combined as the
// group's all-reduces would: the max, then the rescaled sums and target logits summed.
CeResult split_cross_entropy(const CeProblem& p, int ranks, float grad_scale) {
  const int64_t N = p.N, rows = p.Vp / ranks;
  std::vector<OwnedTensor> stats;
  std::vector<parallel::VocabSlice> slices;
  OwnedTensor global_max({N}, DType::F32);
  for (int64_t i = 0; i < N; ++i) global_max.data<float>()[i] = -INFINITY;
  for (int r = 0; r < ranks; ++r) {
    slices.push_back(parallel::vocab_slice(p.V, p.Vp, r, ranks));
    stats.emplace_back(Shape{3, N}, DType::F32);
    ops::lm_head_cross_entropy_partial(stats.back(), p.inp, p.weight->narrow(0, r * rows, rows), p.targets,
                                       slices.back().begin, slices.back().size, kCeIgnore);
    for (int64_t i = 0; i < N; ++i)
      global_max.data<float>()[i] = std::max(global_max.data<float>()[i], stats.back().data<float>()[i]);
  }
  OwnedTensor combined = OwnedTensor::zeros({3, N}, DType::F32);
  for (int r = 0; r < ranks; ++r) {
    ops::cross_entropy_rescale(stats[static_cast<size_t>(r)], global_max);
    for (int64_t e = N; e < 3 * N; ++e) combined.data<float>()[e] += stats[static_cast<size_t>(r)].data<float>()[e];
  }
  for (int64_t i = 0; i < N; ++i) combined.data<float>()[i] = global_max.data<float>()[i];
  OwnedTensor losses({N}, DType::F32), lse({N}, DType::F32);
  ops::cross_entropy_finish(losses, lse, combined, p.targets, kCeIgnore);
  CeResult out;
  out.losses = losses->to_f32_vector();
  out.loss_sum = testing::sum_of(out.losses);
  std::vector<float> dinp(static_cast<size_t>(N * p.C), 0.0f);
  OwnedTensor dweight = OwnedTensor::zeros({p.Vp, p.C}, p.weight->dtype());
  for (int r = 0; r < ranks; ++r) {
    OwnedTensor d({N, p.C}, DType::F32);
    const parallel::VocabSlice s = slices[static_cast<size_t>(r)];
    ops::lm_head_cross_entropy_backward(d, dweight->narrow(0, r * rows, rows), p.inp,
                                        p.weight->narrow(0, r * rows, rows), p.targets, s.begin, s.size, kCeIgnore, lse,
                                        grad_scale);
    for (size_t e = 0; e < dinp.size(); ++e) dinp[e] += d.data<float>()[e];
  }
  out.dinp = dinp;
  out.dweight = dweight->to_f32_vector();
  return out;
}

TEST(SplitCrossEntropy, SlicesCombinedEqualFused) {
  // 150 tokens in 256 rows: over 4 slices the last holds padding only.
  const CeProblem p = testing::ce_problem(29, 16, 150, 256);
  const float scale = grad_scale_of(p);
  const CeResult want = testing::fused_cross_entropy(p, scale);
  for (int ranks : {1, 2, 4}) {
    SCOPED_TRACE(ranks);
    expect_matches(split_cross_entropy(p, ranks, scale), want, 1e-5);
  }
  EXPECT_EQ(parallel::vocab_slice(150, 256, 3, 4).size, 0);
  EXPECT_EQ(parallel::vocab_slice(150, 256, 2, 4).size, 22);
}

TEST(SplitCrossEntropy, OneSliceEqualsFused) {
  for (DType wdt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(wdt));
    const CeProblem p = testing::ce_problem(37, 24, 200, 256, wdt);
    const float scale = grad_scale_of(p);
    const CeResult want = testing::fused_cross_entropy(p, scale);
    CeResult got;
    OwnedTensor losses({p.N}, DType::F32), lse({p.N}, DType::F32), dinp({p.N, p.C}, DType::F32);
    OwnedTensor dweight = OwnedTensor::zeros({p.Vp, p.C}, wdt);
    const parallel::VocabSlice all = parallel::vocab_slice(p.V, p.Vp, 0, 1);
    EXPECT_EQ(all.begin, 0);
    EXPECT_EQ(all.size, p.V);
    parallel::vocab_parallel_cross_entropy_forward(parallel::Group(), losses, lse, p.inp, p.weight, p.targets, all,
                                                   kCeIgnore);
    parallel::vocab_parallel_cross_entropy_backward(parallel::Group(), dinp, dweight, p.inp, p.weight, p.targets, all,
                                                    kCeIgnore, lse, scale);
    got.losses = losses->to_f32_vector();
    got.loss_sum = testing::sum_of(got.losses);
    got.dinp = dinp->to_f32_vector();
    got.dweight = dweight->to_f32_vector();
    expect_matches(got, want, wdt == DType::F32 ? 1e-5 : 1e-2);
    for (int64_t i = 0; i < p.N; ++i)
      if (p.targets.data<int32_t>()[i] == kCeIgnore) {
        EXPECT_EQ(got.losses[static_cast<size_t>(i)], 0.0f);
      }
  }
}

}  // namespace
}  // namespace zt
