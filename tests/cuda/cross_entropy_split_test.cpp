// The split (vocabulary-parallel) LM-head cross-entropy on the GPU (ops/cross_entropy.h:
// partial, rescale, finish, backward; backend/cuda/cross_entropy_split.cu) against the
// fused CPU op on the same inputs: the whole vocabulary as one slice through
// parallel::vocab_parallel_cross_entropy_*, and the vocabulary cut into 2 and 4 slices
// combined by hand (the last of 4 holding padding only); per-row losses, dinp, dweight.
// f32 (1e-5) and a bf16 head with bf16 activations (1e-2).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/split_cross_entropy.h"
#include "ops/cross_entropy.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace zt {
namespace {

using testing::CeProblem;
using testing::CeResult;
using testing::grad_scale_of;
using testing::kCeIgnore;
using testing::max_rel;
using testing::to_device;
using testing::to_host;

std::vector<float> host_f32(const Tensor& d) { return to_host(d)->to_f32_vector(); }

// `ranks` slices on the GPU, combined as the group's all-reduces would (on the host).
CeResult split_on_gpu(const CeProblem& p, int ranks, float scale, DType act) {
  const int64_t N = p.N, rows = p.Vp / ranks;
  OwnedTensor inp_h({N, p.C}, act);
  convert(p.inp->data(), DType::F32, inp_h->data(), act, static_cast<size_t>(N * p.C));
  const OwnedTensor inp = to_device(inp_h), weight = to_device(p.weight), targets = to_device(p.targets);
  std::vector<OwnedTensor> stats;
  std::vector<float> gmax(static_cast<size_t>(N), -INFINITY);
  for (int r = 0; r < ranks; ++r) {
    const parallel::VocabSlice s = parallel::vocab_slice(p.V, p.Vp, r, ranks);
    stats.emplace_back(Shape{3, N}, DType::F32, Device::cuda());
    ops::lm_head_cross_entropy_partial(stats.back(), inp, weight->narrow(0, r * rows, rows), targets, s.begin, s.size,
                                       kCeIgnore);
    const std::vector<float> st = host_f32(stats.back());
    for (int64_t i = 0; i < N; ++i) gmax[static_cast<size_t>(i)] = std::max(gmax[static_cast<size_t>(i)], st[i]);
  }
  OwnedTensor gmax_h({N}, DType::F32), combined_h({3, N}, DType::F32);
  std::copy(gmax.begin(), gmax.end(), gmax_h.data<float>());
  const OwnedTensor gmax_d = to_device(gmax_h);
  for (int64_t i = 0; i < 3 * N; ++i) combined_h.data<float>()[i] = i < N ? gmax[static_cast<size_t>(i)] : 0.0f;
  for (int r = 0; r < ranks; ++r) {
    ops::cross_entropy_rescale(stats[static_cast<size_t>(r)], gmax_d);
    const std::vector<float> st = host_f32(stats[static_cast<size_t>(r)]);
    for (int64_t e = N; e < 3 * N; ++e) combined_h.data<float>()[e] += st[static_cast<size_t>(e)];
  }
  const OwnedTensor combined = to_device(combined_h);
  OwnedTensor losses({N}, DType::F32, Device::cuda()), lse({N}, DType::F32, Device::cuda());
  ops::cross_entropy_finish(losses, lse, combined, targets, kCeIgnore);
  CeResult out;
  out.losses = host_f32(losses);
  out.loss_sum = testing::sum_of(out.losses);
  out.dinp.assign(static_cast<size_t>(N * p.C), 0.0f);
  const OwnedTensor dweight = to_device(OwnedTensor::zeros({p.Vp, p.C}, p.weight->dtype()));
  for (int r = 0; r < ranks; ++r) {
    const parallel::VocabSlice s = parallel::vocab_slice(p.V, p.Vp, r, ranks);
    OwnedTensor d({N, p.C}, act, Device::cuda());
    ops::lm_head_cross_entropy_backward(d, dweight->narrow(0, r * rows, rows), inp, weight->narrow(0, r * rows, rows),
                                        targets, s.begin, s.size, kCeIgnore, lse, scale);
    const std::vector<float> dh = host_f32(d);
    for (size_t e = 0; e < dh.size(); ++e) out.dinp[e] += dh[e];
  }
  out.dweight = host_f32(dweight);
  return out;
}

TEST(SplitCrossEntropyCuda, SlicesEqualTheFusedCpuOp) {
  ZT_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    // 150 tokens in 256 rows; 1000 rows so several threads' shares of each row matter.
    CeProblem p = testing::ce_problem(1000, 64, 150, 256, dt);
    if (dt == DType::BF16) {  // the CPU reference on the same bf16-rounded activations
      std::vector<float> v = p.inp->to_f32_vector();
      for (float& x : v) x = to_f32(to_bf16(x));
      p.inp = testing::make(v, {p.N, p.C});
    }
    const float scale = grad_scale_of(p);
    const CeResult want = testing::fused_cross_entropy(p, scale);
    const double tol = dt == DType::F32 ? 1e-5 : 1e-2;
    for (int ranks : {1, 2, 4}) {
      SCOPED_TRACE(ranks);
      const CeResult got = split_on_gpu(p, ranks, scale, dt);
      EXPECT_LE(max_rel(got.losses, want.losses), tol) << "losses";
      EXPECT_LE(std::fabs(got.loss_sum - want.loss_sum) / std::fabs(want.loss_sum), tol) << "loss sum";
      EXPECT_LE(max_rel(got.dinp, want.dinp), tol) << "dinp";
      EXPECT_LE(max_rel(got.dweight, want.dweight), tol) << "dweight";
    }
  }
}

TEST(SplitCrossEntropyCuda, OneSliceThroughTheParallelLayer) {
  ZT_REQUIRE_GPU();
  const CeProblem p = testing::ce_problem(300, 32, 200, 256);
  const float scale = grad_scale_of(p);
  const CeResult want = testing::fused_cross_entropy(p, scale);
  const OwnedTensor inp = to_device(p.inp), weight = to_device(p.weight), targets = to_device(p.targets);
  OwnedTensor losses({p.N}, DType::F32, Device::cuda()), lse({p.N}, DType::F32, Device::cuda()),
      dinp({p.N, p.C}, DType::F32, Device::cuda());
  const OwnedTensor dweight = to_device(OwnedTensor::zeros({p.Vp, p.C}, DType::F32));
  const parallel::VocabSlice all = parallel::vocab_slice(p.V, p.Vp, 0, 1);
  parallel::vocab_parallel_cross_entropy_forward(parallel::Group(), losses, lse, inp, weight, targets, all, kCeIgnore);
  parallel::vocab_parallel_cross_entropy_backward(parallel::Group(), dinp, dweight, inp, weight, targets, all,
                                                  kCeIgnore, lse, scale);
  EXPECT_LE(max_rel(host_f32(losses), want.losses), 1e-5);
  EXPECT_LE(max_rel(host_f32(dinp), want.dinp), 1e-5);
  EXPECT_LE(max_rel(host_f32(dweight), want.dweight), 1e-5);
}

}  // namespace
}  // namespace zt
