// LM head + cross-entropy: forward against naive double logits + log-softmax + NLL,
// backward (dinp, dweight) against central finite differences of that reference; padded
// vocab rows, ignore_index rows, bf16/f16 weights, several row chunks.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/grad_check.h"
#include "core/tensor.h"
#include "ops/cross_entropy.h"

namespace zt {
namespace {

constexpr int kIgnore = -100;

struct CeCase {
  int64_t N, C, V, Vp;
};

// sum over counted rows of -log softmax(inp W[:V]^T)[target], in double.
double ce_ref(const std::vector<double>& inp, const std::vector<double>& w, const std::vector<int32_t>& targets,
              const CeCase& c, std::vector<double>* row_losses = nullptr) {
  double total = 0;
  if (row_losses) row_losses->assign(static_cast<size_t>(c.N), 0.0);
  std::vector<double> z(static_cast<size_t>(c.V));
  for (int64_t i = 0; i < c.N; ++i) {
    const int32_t t = targets[static_cast<size_t>(i)];
    if (t == kIgnore) continue;
    double mx = -INFINITY;
    for (int64_t v = 0; v < c.V; ++v) {
      double s = 0;
      for (int64_t k = 0; k < c.C; ++k)
        s += inp[static_cast<size_t>(i * c.C + k)] * w[static_cast<size_t>(v * c.C + k)];
      z[static_cast<size_t>(v)] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (int64_t v = 0; v < c.V; ++v) sum += std::exp(z[static_cast<size_t>(v)] - mx);
    const double loss = mx + std::log(sum) - z[static_cast<size_t>(t)];
    if (row_losses) (*row_losses)[static_cast<size_t>(i)] = loss;
    total += loss;
  }
  return total;
}

// Analytic gradients of grad_scale * ce_ref in double (for the larger cases where finite
// differences would be slow): dz = grad_scale (softmax - onehot).
void ce_ref_grad(const std::vector<double>& inp, const std::vector<double>& w, const std::vector<int32_t>& targets,
                 const CeCase& c, double grad_scale, std::vector<double>* dinp, std::vector<double>* dw) {
  dinp->assign(static_cast<size_t>(c.N * c.C), 0.0);
  dw->assign(static_cast<size_t>(c.Vp * c.C), 0.0);
  std::vector<double> z(static_cast<size_t>(c.V));
  for (int64_t i = 0; i < c.N; ++i) {
    const int32_t t = targets[static_cast<size_t>(i)];
    if (t == kIgnore) continue;
    double mx = -INFINITY;
    for (int64_t v = 0; v < c.V; ++v) {
      double s = 0;
      for (int64_t k = 0; k < c.C; ++k)
        s += inp[static_cast<size_t>(i * c.C + k)] * w[static_cast<size_t>(v * c.C + k)];
      z[static_cast<size_t>(v)] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (int64_t v = 0; v < c.V; ++v) sum += std::exp(z[static_cast<size_t>(v)] - mx);
    for (int64_t v = 0; v < c.V; ++v) {
      const double g = grad_scale * (std::exp(z[static_cast<size_t>(v)] - mx) / sum - (v == t ? 1.0 : 0.0));
      for (int64_t k = 0; k < c.C; ++k) {
        (*dinp)[static_cast<size_t>(i * c.C + k)] += g * w[static_cast<size_t>(v * c.C + k)];
        (*dw)[static_cast<size_t>(v * c.C + k)] += g * inp[static_cast<size_t>(i * c.C + k)];
      }
    }
  }
}

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

// Values as stored in dtype (so that the double reference sees the same weights).
std::vector<double> round_to(const std::vector<double>& v, DType dtype) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    r[i] = dtype == DType::BF16 ? to_f32(to_bf16(f)) : dtype == DType::F16 ? to_f32(to_f16(f)) : f;
  }
  return r;
}

OwnedTensor to_tensor(const std::vector<double>& v, const Shape& shape, DType dtype = DType::F32) {
  OwnedTensor t(shape, dtype);
  for (size_t i = 0; i < v.size(); ++i) t->set_f32(static_cast<int64_t>(i), static_cast<float>(v[i]));
  return t;
}

std::vector<double> to_vec(const Tensor& t) {
  const std::vector<float> f = t.to_f32_vector();
  return std::vector<double>(f.begin(), f.end());
}

struct Data {
  std::vector<double> inp, w;
  std::vector<int32_t> targets;
};

Data make_data(const CeCase& c, DType wdtype, unsigned seed, int ignore_every) {
  std::mt19937 rng(seed);
  Data d;
  d.inp = random_vec(static_cast<size_t>(c.N * c.C), rng, 1.0);
  d.w = round_to(random_vec(static_cast<size_t>(c.Vp * c.C), rng, 0.7), wdtype);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.V - 1));
  for (int64_t i = 0; i < c.N; ++i) d.targets.push_back(ignore_every > 0 && i % ignore_every == 1 ? kIgnore : tok(rng));
  return d;
}

// Forward, forward-only consistency, and (if fd) finite-difference backward checks.
void run_case(const CeCase& c, DType wdtype, int ignore_every, bool fd) {
  const Data d = make_data(c, wdtype, static_cast<unsigned>(c.N * 31 + c.V), ignore_every);
  OwnedTensor inp = to_tensor(d.inp, {c.N, c.C});
  OwnedTensor w = to_tensor(d.w, {c.Vp, c.C}, wdtype);
  OwnedTensor targets({c.N}, DType::I32);
  for (int64_t i = 0; i < c.N; ++i) targets.data<int32_t>()[i] = d.targets[static_cast<size_t>(i)];
  OwnedTensor losses({c.N}, DType::F32);

  std::vector<double> ref_rows;
  const double ref = ce_ref(d.inp, d.w, d.targets, c, &ref_rows);
  int64_t ref_count = 0;
  for (int32_t t : d.targets) ref_count += t != kIgnore;

  const ops::CrossEntropyResult fwd = ops::lm_head_cross_entropy_forward(inp, w, targets, c.V, kIgnore, losses);
  EXPECT_EQ(fwd.count, ref_count);
  const double loss_err = std::fabs(fwd.loss_sum - ref) / std::max(std::fabs(ref), 1e-30);
  EXPECT_LT(loss_err, 1e-5) << "loss";
  const double rows_err = scaled_error(to_vec(losses), ref_rows);
  EXPECT_LT(rows_err, 1e-5) << "row losses";

  // Forward-backward: dweight starts non-zero (it accumulates), padding rows must keep it.
  const double grad_scale = ref_count > 0 ? 1.0 / static_cast<double>(ref_count) : 1.0;
  std::vector<double> dw0(static_cast<size_t>(c.Vp * c.C));
  for (size_t i = 0; i < dw0.size(); ++i) dw0[i] = round_to({0.25 * std::sin(double(i))}, wdtype)[0];
  OwnedTensor dinp({c.N, c.C}, DType::F32);
  dinp->fill_f32(777.0f);
  OwnedTensor dw = to_tensor(dw0, {c.Vp, c.C}, wdtype);
  const ops::CrossEntropyResult fb = ops::lm_head_cross_entropy_forward_backward(
      dinp, dw, inp, w, targets, c.V, kIgnore, static_cast<float>(grad_scale));
  EXPECT_EQ(fb.count, fwd.count);
  EXPECT_NEAR(fb.loss_sum, fwd.loss_sum, 1e-6 * std::max(1.0, std::fabs(fwd.loss_sum)));

  std::vector<double> dinp_ref, dw_ref;
  if (fd) {
    auto f_inp = [&](const std::vector<double>& x) { return grad_scale * ce_ref(x, d.w, d.targets, c); };
    auto f_w = [&](const std::vector<double>& x) { return grad_scale * ce_ref(d.inp, x, d.targets, c); };
    dinp_ref = testing::numeric_gradient(f_inp, d.inp);
    dw_ref = testing::numeric_gradient(f_w, d.w);
    // The finite differences agree with the analytic double gradient (sanity of the reference).
    std::vector<double> a_inp, a_w;
    ce_ref_grad(d.inp, d.w, d.targets, c, grad_scale, &a_inp, &a_w);
    EXPECT_LT(scaled_error(a_inp, dinp_ref), 1e-7);
    EXPECT_LT(scaled_error(a_w, dw_ref), 1e-7);
  } else {
    ce_ref_grad(d.inp, d.w, d.targets, c, grad_scale, &dinp_ref, &dw_ref);
  }
  const double dinp_err = scaled_error(to_vec(dinp), dinp_ref);
  EXPECT_LT(dinp_err, 1e-5) << "dinp";
  // dweight - its starting value = the gradient (exact in f32; rounded once for bf16/f16).
  std::vector<double> got_dw = to_vec(dw);
  double dw_err = 0;
  if (wdtype == DType::F32) {
    for (size_t i = 0; i < got_dw.size(); ++i) got_dw[i] -= dw0[i];
    dw_err = scaled_error(got_dw, dw_ref);
    EXPECT_LT(dw_err, 1e-5) << "dweight";
  } else {
    // Compare with the start + exact gradient rounded to the storage type: one rounding step.
    const double ulp = wdtype == DType::BF16 ? 1.0 / 128 : 1.0 / 1024;
    for (size_t i = 0; i < got_dw.size(); ++i) {
      const double expect = dw0[i] + dw_ref[i];
      const double err = std::fabs(got_dw[i] - expect);
      dw_err = std::max(dw_err, err / std::max(std::fabs(expect), 1e-3));
      ASSERT_LE(err, ulp * std::fabs(expect) + 1e-6) << i;
    }
  }
  // Padding rows of dweight are untouched.
  for (int64_t k = c.V * c.C; k < c.Vp * c.C; ++k)
    ASSERT_EQ(dw->get_f32(k), static_cast<float>(dw0[static_cast<size_t>(k)])) << "padding row element " << k;
  // Ignored rows have zero dinp.
  for (int64_t i = 0; i < c.N; ++i) {
    if (d.targets[static_cast<size_t>(i)] != kIgnore) continue;
    for (int64_t k = 0; k < c.C; ++k) ASSERT_EQ(dinp->get_f32(i * c.C + k), 0.0f);
  }
  std::printf("cross_entropy N=%lld C=%lld V=%lld Vp=%lld %s: loss %.2e rows %.2e dinp %.2e dweight %.2e\n",
              static_cast<long long>(c.N), static_cast<long long>(c.C), static_cast<long long>(c.V),
              static_cast<long long>(c.Vp), dtype_name(wdtype), loss_err, rows_err, dinp_err, dw_err);
}

TEST(CrossEntropyGrad, PaddedVocabWithIgnored) { run_case({7, 6, 11, 16}, DType::F32, 3, true); }
TEST(CrossEntropyGrad, NoPaddingNoIgnored) { run_case({5, 4, 9, 9}, DType::F32, 0, true); }
TEST(CrossEntropyGrad, Bf16Weight) { run_case({7, 6, 11, 16}, DType::BF16, 3, true); }
TEST(CrossEntropyGrad, F16Weight) { run_case({7, 6, 11, 16}, DType::F16, 4, true); }
// More rows than one chunk (256), so chunks follow each other; analytic double reference.
TEST(CrossEntropyGrad, SeveralChunks) { run_case({600, 8, 37, 64}, DType::F32, 5, false); }
TEST(CrossEntropyGrad, SeveralChunksBf16) { run_case({530, 8, 37, 64}, DType::BF16, 7, false); }
// A vocabulary large enough that the chunk is smaller than 256 rows.
TEST(CrossEntropyGrad, LargeVocab) { run_case({150, 4, 200003, 200064}, DType::F32, 9, false); }

// The vocabulary is split into per-thread slices (>= 128 columns each): force 4 slices.
TEST(CrossEntropyGrad, VocabSlices) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  run_case({6, 3, 1000, 1024}, DType::F32, 4, true);
  run_case({6, 3, 1000, 1024}, DType::BF16, 3, false);
  run_case({300, 5, 700, 768}, DType::F32, 7, false);  // slices and several chunks
  omp_set_num_threads(saved);
}

TEST(CrossEntropyGrad, NanLogitPropagates) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  const CeCase c{3, 2, 600, 640};
  Data d = make_data(c, DType::F32, 3, 0);
  d.w[static_cast<size_t>(550 * c.C)] = NAN;  // a column in the last slice
  OwnedTensor inp = to_tensor(d.inp, {c.N, c.C});
  OwnedTensor w = to_tensor(d.w, {c.Vp, c.C});
  OwnedTensor targets({c.N}, DType::I32);
  for (int64_t i = 0; i < c.N; ++i) targets.data<int32_t>()[i] = 3;
  const ops::CrossEntropyResult r = ops::lm_head_cross_entropy_forward(inp, w, targets, c.V, kIgnore, Tensor{});
  omp_set_num_threads(saved);
  EXPECT_TRUE(std::isnan(r.loss_sum));
}

TEST(CrossEntropyGrad, AllIgnored) {
  const CeCase c{6, 5, 11, 16};
  Data d = make_data(c, DType::F32, 5, 0);
  for (int32_t& t : d.targets) t = kIgnore;
  OwnedTensor inp = to_tensor(d.inp, {c.N, c.C});
  OwnedTensor w = to_tensor(d.w, {c.Vp, c.C});
  OwnedTensor targets({c.N}, DType::I32);
  for (int64_t i = 0; i < c.N; ++i) targets.data<int32_t>()[i] = kIgnore;
  OwnedTensor losses({c.N}, DType::F32);
  losses->fill_f32(5.0f);
  const ops::CrossEntropyResult fwd = ops::lm_head_cross_entropy_forward(inp, w, targets, c.V, kIgnore, losses);
  EXPECT_EQ(fwd.count, 0);
  EXPECT_EQ(fwd.loss_sum, 0.0);
  for (int64_t i = 0; i < c.N; ++i) EXPECT_EQ(losses->get_f32(i), 0.0f);
  OwnedTensor dinp({c.N, c.C}, DType::F32);
  dinp->fill_f32(3.0f);
  OwnedTensor dw({c.Vp, c.C}, DType::F32);
  dw->fill_f32(0.5f);
  const ops::CrossEntropyResult fb =
      ops::lm_head_cross_entropy_forward_backward(dinp, dw, inp, w, targets, c.V, kIgnore, 1.0f);
  EXPECT_EQ(fb.count, 0);
  EXPECT_EQ(fb.loss_sum, 0.0);
  for (int64_t k = 0; k < c.N * c.C; ++k) ASSERT_EQ(dinp->get_f32(k), 0.0f);
  for (int64_t k = 0; k < c.Vp * c.C; ++k) ASSERT_EQ(dw->get_f32(k), 0.5f);
}

// A frozen head (LoRA): no dweight, the same dinp and loss as with one, bit for bit.
TEST(CrossEntropyGrad, WithoutWeightGradientDinpIsTheSame) {
  for (DType wt : {DType::F32, DType::BF16}) {
    const CeCase c{7, 6, 11, 16};
    const Data d = make_data(c, wt, 3, 3);
    OwnedTensor inp = to_tensor(d.inp, {c.N, c.C});
    OwnedTensor w = to_tensor(d.w, {c.Vp, c.C}, wt);
    OwnedTensor targets({c.N}, DType::I32);
    for (int64_t i = 0; i < c.N; ++i) targets.data<int32_t>()[i] = d.targets[static_cast<size_t>(i)];
    OwnedTensor dinp1({c.N, c.C}, DType::F32), dinp2({c.N, c.C}, DType::F32);
    OwnedTensor dw = OwnedTensor::zeros({c.Vp, c.C}, wt);
    const auto r1 = ops::lm_head_cross_entropy_forward_backward(dinp1, dw, inp, w, targets, c.V, kIgnore, 0.5f);
    const auto r2 = ops::lm_head_cross_entropy_forward_backward(dinp2, Tensor{}, inp, w, targets, c.V, kIgnore, 0.5f);
    EXPECT_EQ(r1.loss_sum, r2.loss_sum);
    EXPECT_EQ(r1.count, r2.count);
    EXPECT_EQ(dinp1->to_f32_vector(), dinp2->to_f32_vector()) << dtype_name(wt);
  }
}

TEST(CrossEntropyGrad, ForwardWithoutLosses) {
  const CeCase c{4, 3, 11, 16};
  const Data d = make_data(c, DType::F32, 9, 0);
  OwnedTensor inp = to_tensor(d.inp, {c.N, c.C});
  OwnedTensor w = to_tensor(d.w, {c.Vp, c.C});
  OwnedTensor targets({c.N}, DType::I32);
  for (int64_t i = 0; i < c.N; ++i) targets.data<int32_t>()[i] = d.targets[static_cast<size_t>(i)];
  const ops::CrossEntropyResult r = ops::lm_head_cross_entropy_forward(inp, w, targets, c.V, kIgnore, Tensor{});
  EXPECT_EQ(r.count, 4);
  EXPECT_NEAR(r.loss_sum, ce_ref(d.inp, d.w, d.targets, c), 1e-5);
}

TEST(CrossEntropyGrad, BadTargetIsAnError) {
  OwnedTensor inp = OwnedTensor::zeros({2, 3}, DType::F32);
  OwnedTensor w = OwnedTensor::zeros({16, 3}, DType::F32);
  OwnedTensor targets({2}, DType::I32);
  targets.data<int32_t>()[0] = 1;
  targets.data<int32_t>()[1] = 11;  // a padding row: not a valid class
  EXPECT_THROW(ops::lm_head_cross_entropy_forward(inp, w, targets, 11, kIgnore, Tensor{}), Error);
  OwnedTensor bad_w = OwnedTensor::zeros({16, 4}, DType::F32);
  targets.data<int32_t>()[1] = 2;
  EXPECT_THROW(ops::lm_head_cross_entropy_forward(inp, bad_w, targets, 11, kIgnore, Tensor{}), Error);
}

}  // namespace
}  // namespace zt
