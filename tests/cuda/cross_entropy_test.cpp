// CUDA LM head + cross-entropy (backend/cuda/cross_entropy.cu) against the CPU backend on
// the same inputs: loss sum, count, per-row losses, dinp (=), dweight (+=, padding rows
// untouched), ignored rows, chunking (one chunk, several chunks with a partial last one),
// f32/bf16 activations with f32/bf16/f16 weights, odd sizes (V not a multiple of 4 or 64;
// rows longer than one tile of the in-place dlogits pass) and GPT-2's vocabulary (50257
// padded to 50304) x 768; NaN logits give NaN losses, forward and forward_backward.
//
// Metric: max|cuda - cpu| / max|cpu| per output (|a - b| / |b| for the loss sum).
// f32 everywhere: <= 1e-5 (f32 logits from exact-f32 cuBLASLt; only summation orders and
// expf vs the CPU's exp_approx differ). Any 16-bit operand: <= 1e-2 against the CPU op on
// the same bf16-rounded activations (the CUDA path rounds dlogits to the 16-bit compute
// dtype before the two backward products; logits and losses stay f32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cross_entropy_kernels.h"
#include "backend/cuda_api.h"
#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cross_entropy.h"

namespace {

using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::Tensor;
using zt::testing::make;
using zt::testing::randn;
using zt::testing::to_device;
using zt::testing::to_host;

constexpr int kIgnore = -100;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16;

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = zt::to_f32(zt::to_bf16(x));
  return v;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::fabs(static_cast<double>(want[i])));
  }
  return den > 0.0 ? num / den : num;
}

// |a - b| / |b| (|a - b| when b is 0).
double scalar_rel(double a, double b) { return b != 0.0 ? std::fabs(a - b) / std::fabs(b) : std::fabs(a - b); }

std::vector<float> host_values(const Tensor& device) { return to_host(device)->to_f32_vector(); }

OwnedTensor make_targets(const std::vector<int32_t>& t) {
  OwnedTensor h({static_cast<int64_t>(t.size())}, DType::I32);
  for (size_t i = 0; i < t.size(); ++i) h.data<int32_t>()[i] = t[i];
  return h;
}

// Targets in [0, V), about `ignored` of them ignore_index.
std::vector<int32_t> random_targets(int64_t N, int64_t V, double ignored, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> t(static_cast<size_t>(N));
  for (auto& x : t) x = u(gen) < ignored ? kIgnore : tok(gen);
  return t;
}

struct CeCase {
  int64_t N, C, V, Vp;
  DType act, weight;
  int64_t chunk_rows;  // 0: the op's own choice, through ops/ (dispatch); > 0: cuda:: directly
};

std::string case_name(const ::testing::TestParamInfo<CeCase>& info) {
  const CeCase& c = info.param;
  return "N" + std::to_string(c.N) + "_C" + std::to_string(c.C) + "_V" + std::to_string(c.V) + "_Vp" +
         std::to_string(c.Vp) + "_act" + zt::dtype_name(c.act) + "_w" + zt::dtype_name(c.weight) + "_chunk" +
         std::to_string(c.chunk_rows);
}

void compare_with_cpu(const CeCase& c, const std::vector<int32_t>& targets, float grad_scale) {
  const int64_t N = c.N, C = c.C, V = c.V, Vp = c.Vp;
  const bool exact_f32 = c.act == F32 && c.weight == F32;
  std::vector<float> x = randn(static_cast<size_t>(N * C), 21);
  if (!exact_f32) x = round_bf16(x);
  const float wscale = 2.0f / std::sqrt(static_cast<float>(C));  // logits of a few units
  const OwnedTensor w = make(randn(static_cast<size_t>(Vp * C), 22, wscale), {Vp, C}, c.weight);
  const OwnedTensor dw0 = make(randn(static_cast<size_t>(Vp * C), 23, 1e-3f), {Vp, C}, c.weight);
  const OwnedTensor tg = make_targets(targets);
  const double tol = exact_f32 ? 1e-5 : 1e-2;

  // CPU reference.
  const OwnedTensor x_cpu = make(x, {N, C});
  OwnedTensor losses_cpu({N}, F32), dinp_cpu({N, C}, F32), dw_cpu({Vp, C}, c.weight);
  dw_cpu->copy_from(dw0);
  const auto fwd_cpu = zt::ops::lm_head_cross_entropy_forward(x_cpu, w, tg, V, kIgnore, losses_cpu);
  const auto fb_cpu =
      zt::ops::lm_head_cross_entropy_forward_backward(dinp_cpu, dw_cpu, x_cpu, w, tg, V, kIgnore, grad_scale);

  // GPU.
  const OwnedTensor x_d = to_device(make(x, {N, C}, c.act)), w_d = to_device(w), tg_d = to_device(tg);
  const OwnedTensor losses_d = to_device(make(std::vector<float>(static_cast<size_t>(N), kNaN), {N}));
  const OwnedTensor dinp_d = to_device(make(std::vector<float>(static_cast<size_t>(N * C), kNaN), {N, C}, c.act));
  const OwnedTensor dw_d = to_device(dw0);
  double fwd_sum = 0.0, fb_sum = 0.0;
  int64_t fwd_count = 0, fb_count = 0;
  if (c.chunk_rows == 0) {
    const auto f = zt::ops::lm_head_cross_entropy_forward(x_d, w_d, tg_d, V, kIgnore, losses_d);
    const auto fb =
        zt::ops::lm_head_cross_entropy_forward_backward(dinp_d, dw_d, x_d, w_d, tg_d, V, kIgnore, grad_scale);
    fwd_sum = f.loss_sum, fwd_count = f.count, fb_sum = fb.loss_sum, fb_count = fb.count;
  } else {
    const auto f = zt::cuda::lm_head_cross_entropy_forward(x_d, w_d, tg_d, V, kIgnore, losses_d, c.chunk_rows);
    const auto fb = zt::cuda::lm_head_cross_entropy_forward_backward(dinp_d, dw_d, x_d, w_d, tg_d, V, kIgnore,
                                                                     grad_scale, c.chunk_rows);
    fwd_sum = f.loss_sum, fwd_count = f.count, fb_sum = fb.loss_sum, fb_count = fb.count;
  }

  EXPECT_EQ(fwd_count, fwd_cpu.count);
  EXPECT_EQ(fb_count, fb_cpu.count);
  ASSERT_TRUE(std::isfinite(fwd_sum) && std::isfinite(fb_sum));
  EXPECT_LE(scalar_rel(fwd_sum, fwd_cpu.loss_sum), tol) << "forward loss sum " << fwd_sum << " vs " << fwd_cpu.loss_sum;
  EXPECT_LE(scalar_rel(fb_sum, fb_cpu.loss_sum), tol)
      << "forward_backward loss sum " << fb_sum << " vs " << fb_cpu.loss_sum;
  const auto losses = host_values(losses_d);
  EXPECT_LE(rel_err(losses, losses_cpu->to_f32_vector()), tol) << "per-row losses";
  for (int64_t i = 0; i < N; ++i) {
    if (targets[static_cast<size_t>(i)] == kIgnore) {
      EXPECT_EQ(losses[static_cast<size_t>(i)], 0.0f) << "row " << i;
    }
  }
  EXPECT_LE(rel_err(host_values(dinp_d), dinp_cpu->to_f32_vector()), tol) << "dinp";

  // dweight: rows < V against the CPU (+=); padding rows bit for bit as they were.
  const OwnedTensor dw_host = to_host(dw_d);
  const auto dw = dw_host->to_f32_vector(), dw_ref = dw_cpu->to_f32_vector();
  const size_t live = static_cast<size_t>(V * C);
  EXPECT_LE(rel_err(std::vector<float>(dw.begin(), dw.begin() + live),
                    std::vector<float>(dw_ref.begin(), dw_ref.begin() + live)),
            tol)
      << "dweight rows < V";
  const size_t es = zt::dtype_size(c.weight);
  EXPECT_EQ(std::memcmp(static_cast<const char*>(dw_host->data()) + live * es,
                        static_cast<const char*>(dw0->data()) + live * es, (static_cast<size_t>(Vp * C) - live) * es),
            0)
      << "padding rows of dweight changed";
}

class CudaCrossEntropy : public ::testing::TestWithParam<CeCase> {};

TEST_P(CudaCrossEntropy, MatchesCpu) {
  ZT_REQUIRE_GPU();
  const CeCase& c = GetParam();
  const auto targets = random_targets(c.N, c.V, 0.2, 31);
  const int64_t counted = std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnore; });
  compare_with_cpu(c, targets, 1.0f / static_cast<float>(std::max<int64_t>(counted, 1)));
}

std::vector<CeCase> odd_cases() {
  std::vector<CeCase> cases;
  const DType combos[][2] = {{F32, F32}, {F32, BF16}, {BF16, BF16}, {BF16, F32}, {F32, F16}, {BF16, F16}, {F16, F16}};
  for (const auto& t : combos) {
    cases.push_back({37, 19, 101, 128, t[0], t[1], 0});  // one chunk, through ops/
    cases.push_back({37, 19, 101, 128, t[0], t[1], 8});  // 5 chunks, the last of 5 rows
  }
  cases.push_back({13, 8, 77, 77, F32, F32, 4});  // no padding rows
  cases.push_back({13, 8, 77, 77, BF16, BF16, 4});
  cases.push_back({1, 1, 1, 1, F32, F32, 0});     // a single class: loss 0
  cases.push_back({5, 3, 2, 64, BF16, BF16, 1});  // one row per chunk
  cases.push_back({70, 64, 1000, 1024, BF16, BF16, 0});
  cases.push_back({70, 64, 1000, 1024, F32, F32, 32});  // 3 chunks, the last of 6 rows
  // V = 10007 (prime, V % 4 == 3): rows of several tiles of the in-place dlogits pass (f32 in
  // place; bf16/f16 as 16-bit over the f32 row), 3 chunks with the last of 5 rows.
  for (const auto& t : combos) cases.push_back({37, 19, 10007, 10048, t[0], t[1], 16});
  cases.push_back({37, 19, 10007, 10007, BF16, BF16, 0});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Odd, CudaCrossEntropy, ::testing::ValuesIn(odd_cases()), case_name);

// GPT-2: vocabulary 50257 padded to 50304, C = 768. chunk 64: three chunks, so bf16
// dweight goes through the f32 accumulator; chunk 0: one chunk (direct beta = 1).
INSTANTIATE_TEST_SUITE_P(
    Gpt2, CudaCrossEntropy,
    ::testing::Values(CeCase{192, 768, 50257, 50304, F32, F32, 0}, CeCase{192, 768, 50257, 50304, F32, F32, 64},
                      CeCase{192, 768, 50257, 50304, BF16, BF16, 0}, CeCase{192, 768, 50257, 50304, BF16, BF16, 64},
                      CeCase{192, 768, 50257, 50304, F16, F16, 0}, CeCase{192, 768, 50257, 50304, F16, F16, 64},
                      CeCase{192, 768, 50257, 50304, F32, BF16, 64}),
    case_name);

TEST(CudaCrossEntropyRows, AllRowsIgnored) {
  ZT_REQUIRE_GPU();
  const int64_t N = 9, C = 16, V = 50, Vp = 64;
  const OwnedTensor x_d = to_device(make(randn(static_cast<size_t>(N * C), 1), {N, C}));
  const OwnedTensor w = make(randn(static_cast<size_t>(Vp * C), 2), {Vp, C}, BF16);
  const OwnedTensor w_d = to_device(w), dw_d = to_device(w);
  const OwnedTensor tg_d = to_device(make_targets(std::vector<int32_t>(static_cast<size_t>(N), kIgnore)));
  const OwnedTensor dinp_d = to_device(make(std::vector<float>(static_cast<size_t>(N * C), kNaN), {N, C}));
  const auto r = zt::ops::lm_head_cross_entropy_forward_backward(dinp_d, dw_d, x_d, w_d, tg_d, V, kIgnore, 1.0f);
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.loss_sum, 0.0);
  for (float v : host_values(dinp_d)) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(host_values(dw_d), w->to_f32_vector());
  const auto f = zt::ops::lm_head_cross_entropy_forward(x_d, w_d, tg_d, V, kIgnore, Tensor{});
  EXPECT_EQ(f.count, 0);
  EXPECT_EQ(f.loss_sum, 0.0);
}

// A target outside [0, V) that is not ignore_index is BadInput, as on the CPU, naming the
// first such row; a padding row index (V <= t < Vp) is outside too.
TEST(CudaCrossEntropyRows, InvalidTargetIsBadInput) {
  ZT_REQUIRE_GPU();
  const int64_t N = 6, C = 8, V = 40, Vp = 64;
  const OwnedTensor x_d = to_device(make(randn(static_cast<size_t>(N * C), 1), {N, C}));
  const OwnedTensor w_d = to_device(make(randn(static_cast<size_t>(Vp * C), 2), {Vp, C}));
  const OwnedTensor dw_d = to_device(OwnedTensor::zeros({Vp, C}, F32));
  const OwnedTensor dinp_d = to_device(OwnedTensor({N, C}, F32));
  for (int32_t bad : {static_cast<int32_t>(V), -5, static_cast<int32_t>(Vp)}) {
    const OwnedTensor tg_d = to_device(make_targets({1, 2, kIgnore, bad, 3, bad}));
    try {
      zt::ops::lm_head_cross_entropy_forward(x_d, w_d, tg_d, V, kIgnore, Tensor{});
      FAIL() << "target " << bad << " was accepted";
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find("at row 3"), std::string::npos) << e.what();
    }
    EXPECT_THROW(zt::ops::lm_head_cross_entropy_forward_backward(dinp_d, dw_d, x_d, w_d, tg_d, V, kIgnore, 1.0f),
                 zt::Error);
  }
}

// A NaN in a row's input makes the loss NaN (what the fp16 loss scaler looks for).
TEST(CudaCrossEntropyRows, NanPropagatesToTheLoss) {
  ZT_REQUIRE_GPU();
  const int64_t N = 4, C = 8, V = 30;
  std::vector<float> x = randn(static_cast<size_t>(N * C), 1);
  x[static_cast<size_t>(2 * C + 5)] = kNaN;
  const OwnedTensor x_d = to_device(make(x, {N, C}));
  const OwnedTensor w_d = to_device(make(randn(static_cast<size_t>(V * C), 2), {V, C}));
  const OwnedTensor tg_d = to_device(make_targets({0, 1, 2, 3}));
  const auto r = zt::ops::lm_head_cross_entropy_forward(x_d, w_d, tg_d, V, kIgnore, Tensor{});
  EXPECT_EQ(r.count, N);
  EXPECT_TRUE(std::isnan(r.loss_sum));
}

// One NaN logit makes its row's loss NaN, whatever the compute dtype and chunking, forward
// and forward_backward: a NaN input element (the whole row's logits NaN) or a NaN weight
// element (one NaN logit in every row: at the start, in the middle or at the ragged end of
// the row). Ignored rows keep loss 0; rows without a NaN logit stay finite.
TEST(CudaCrossEntropyRows, NanLogitPropagatesToItsRow) {
  ZT_REQUIRE_GPU();
  const int64_t N = 7, C = 8, V = 3001, Vp = 3008;
  const std::vector<int32_t> targets = {0, 1, kIgnore, 3, static_cast<int32_t>(V - 1), kIgnore, 1234};
  const OwnedTensor tg_d = to_device(make_targets(targets));
  for (DType wt : {F32, BF16}) {
    for (int64_t chunk_rows : {int64_t{0}, int64_t{3}}) {
      for (int64_t col : {int64_t{-1}, int64_t{0}, int64_t{1234}, V - 1}) {
        SCOPED_TRACE("weight " + std::string(zt::dtype_name(wt)) + ", chunk_rows " + std::to_string(chunk_rows) +
                     (col < 0 ? std::string(", NaN input row 3") : ", NaN logit column " + std::to_string(col)));
        std::vector<float> x = randn(static_cast<size_t>(N * C), 1);
        std::vector<float> w = randn(static_cast<size_t>(Vp * C), 2, 0.5f);
        if (col < 0) {
          x[static_cast<size_t>(3 * C + 5)] = kNaN;
        } else {
          w[static_cast<size_t>(col * C + 2)] = kNaN;
        }
        const OwnedTensor x_d = to_device(make(x, {N, C})), w_d = to_device(make(w, {Vp, C}, wt));
        const OwnedTensor losses_d = to_device(make(std::vector<float>(static_cast<size_t>(N), 123.0f), {N}));
        const auto f = zt::cuda::lm_head_cross_entropy_forward(x_d, w_d, tg_d, V, kIgnore, losses_d, chunk_rows);
        EXPECT_EQ(f.count, 5);
        EXPECT_TRUE(std::isnan(f.loss_sum)) << f.loss_sum;
        const auto losses = host_values(losses_d);
        for (int64_t i = 0; i < N; ++i) {
          const float l = losses[static_cast<size_t>(i)];
          if (targets[static_cast<size_t>(i)] == kIgnore) {
            EXPECT_EQ(l, 0.0f) << "row " << i;
          } else if (col >= 0 || i == 3) {
            EXPECT_TRUE(std::isnan(l)) << "row " << i << ": " << l;
          } else {
            EXPECT_TRUE(std::isfinite(l)) << "row " << i << ": " << l;
          }
        }
        const OwnedTensor dinp_d = to_device(OwnedTensor({N, C}, F32));
        const OwnedTensor dw_d = to_device(OwnedTensor::zeros({Vp, C}, wt));
        const auto fb = zt::cuda::lm_head_cross_entropy_forward_backward(dinp_d, dw_d, x_d, w_d, tg_d, V, kIgnore, 0.2f,
                                                                         chunk_rows);
        EXPECT_EQ(fb.count, 5);
        EXPECT_TRUE(std::isnan(fb.loss_sum)) << fb.loss_sum;
      }
    }
  }
}

// N = 0 returns nothing and touches nothing.
TEST(CudaCrossEntropyRows, NoRows) {
  ZT_REQUIRE_GPU();
  const int64_t C = 8, V = 30;
  const OwnedTensor w = make(randn(static_cast<size_t>(V * C), 2), {V, C});
  const OwnedTensor w_d = to_device(w), dw_d = to_device(w);
  const OwnedTensor x_d = to_device(OwnedTensor({0, C}, F32)), tg_d = to_device(OwnedTensor({0}, DType::I32));
  const auto r = zt::ops::lm_head_cross_entropy_forward_backward(to_device(OwnedTensor({0, C}, F32)), dw_d, x_d, w_d,
                                                                 tg_d, V, kIgnore, 1.0f);
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.loss_sum, 0.0);
  EXPECT_EQ(host_values(dw_d), w->to_f32_vector());
}

}  // namespace
