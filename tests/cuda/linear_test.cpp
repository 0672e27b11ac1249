// CUDA linear layer (backend/cuda/linear.cu through ops/linear.h) against the CPU backend
// on the same inputs: both weight layouts, f32/bf16 activations, f32/bf16/f16 weights and
// gradients, with and without bias, odd and real sizes, empty dimensions, misaligned views.
//
// Metric: max|cuda - cpu| / max|cpu| per output. f32 everywhere: <= 1e-5 (cuBLASLt runs
// exact f32, CUBLAS_COMPUTE_32F without TF32, so only the summation order differs). Any
// 16-bit operand or output: <= 1e-2, against the CPU op on the same bf16-rounded
// activations (the CUDA path rounds f32 activations to the 16-bit weight dtype, and
// rounds 16-bit outputs once). Outputs (=) are pre-filled with NaN on the device, so a
// missed element shows; dweight/dbias (+=) start from random values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda_api.h"
#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/linear.h"

namespace {

using zt::Device;
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::Tensor;
using zt::WeightLayout;
using zt::testing::make;
using zt::testing::randn;
using zt::testing::to_device;
using zt::testing::to_host;

const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> round_to(std::vector<float> v, DType dt) {
  for (float& x : v) {
    if (dt == DType::BF16) x = zt::to_f32(zt::to_bf16(x));
    if (dt == DType::F16) x = zt::to_f32(zt::to_f16(x));
  }
  return v;
}

// max|got - want| / max|want| (max|got - want| when want is all zero); infinite when got
// holds a NaN or Inf.
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

std::vector<float> host_values(const Tensor& device) { return to_host(device)->to_f32_vector(); }

// A device tensor of the shape and dtype filled with NaN.
OwnedTensor device_nan(const Shape& shape, DType dt) {
  return to_device(make(std::vector<float>(static_cast<size_t>(zt::shape_numel(shape)), kNaN), shape, dt));
}

// A device copy of `host` placed `offset` elements into a larger buffer: a view whose
// address is only element-aligned (as a tensor inside a flat parameter buffer can be).
struct OffsetTensor {
  OwnedTensor storage;
  Tensor view;
};
OffsetTensor to_device_at(const Tensor& host, int64_t offset) {
  OffsetTensor d;
  d.storage = OwnedTensor({host.numel() + offset}, host.dtype(), Device::cuda());
  char* p = static_cast<char*>(d.storage->data()) + offset * static_cast<int64_t>(zt::dtype_size(host.dtype()));
  zt::cuda::copy_to_device(p, host.data(), host.nbytes());
  d.view = Tensor(p, host.shape(), host.dtype(), Device::cuda());
  return d;
}

struct LinearCase {
  int64_t N, I, O;
  WeightLayout layout;
  DType act, weight, grad;
  bool bias;
};

std::string case_name(const ::testing::TestParamInfo<LinearCase>& info) {
  const LinearCase& c = info.param;
  return "N" + std::to_string(c.N) + "_I" + std::to_string(c.I) + "_O" + std::to_string(c.O) + "_" +
         (c.layout == WeightLayout::InOut ? "InOut" : "OutIn") + "_act" + zt::dtype_name(c.act) + "_w" +
         zt::dtype_name(c.weight) + "_g" + zt::dtype_name(c.grad) + (c.bias ? "_bias" : "_nobias");
}

struct Results {
  std::vector<float> out, dinp, dweight, dbias;
};

// Runs forward + backward of case c on the CPU (reference) and on the GPU, with inputs at
// element offset `offset` inside their device buffers (0: the allocator's aligned blocks).
void compare_with_cpu(const LinearCase& c, int64_t offset = 0) {
  const int64_t N = c.N, I = c.I, O = c.O;
  const bool in_out = c.layout == WeightLayout::InOut;
  const Shape wshape = in_out ? Shape{I, O} : Shape{O, I};
  const bool exact_f32 = c.act == DType::F32 && c.weight == DType::F32;
  std::vector<float> x = randn(static_cast<size_t>(N * I), 11);
  std::vector<float> dy = randn(static_cast<size_t>(N * O), 12);
  if (!exact_f32) {
    x = round_to(x, DType::BF16);
    dy = round_to(dy, DType::BF16);
  }
  const float wscale = I > 0 ? 1.0f / std::sqrt(static_cast<float>(I)) : 1.0f;
  const OwnedTensor w = make(randn(static_cast<size_t>(O * I), 13, wscale), wshape, c.weight);
  const OwnedTensor b = make(randn(static_cast<size_t>(O), 14), {O}, c.weight);
  const OwnedTensor dw0 = make(randn(static_cast<size_t>(O * I), 15, 0.5f), wshape, c.grad);
  const OwnedTensor db0 = make(randn(static_cast<size_t>(O), 16, 0.5f), {O}, c.grad);

  // CPU reference: f32 activations holding the same values.
  const OwnedTensor x_cpu = make(x, {N, I}), dy_cpu = make(dy, {N, O});
  OwnedTensor out_cpu({N, O}, DType::F32), dinp_cpu({N, I}, DType::F32);
  OwnedTensor dw_cpu(wshape, c.grad), db_cpu({O}, c.grad);
  dw_cpu->copy_from(dw0);
  db_cpu->copy_from(db0);
  zt::ops::linear_forward(out_cpu, x_cpu, w, c.bias ? b.view() : Tensor{}, c.layout);
  zt::ops::linear_backward(dinp_cpu, dw_cpu, db_cpu, dy_cpu, x_cpu, w, c.layout);

  // GPU.
  const OffsetTensor x_d = to_device_at(make(x, {N, I}, c.act), offset);
  const OffsetTensor dy_d = to_device_at(make(dy, {N, O}, c.act), offset);
  const OffsetTensor w_d = to_device_at(w, offset), b_d = to_device_at(b, offset);
  const OffsetTensor dw_d = to_device_at(dw0, offset), db_d = to_device_at(db0, offset);
  const OwnedTensor nan_out = make(std::vector<float>(static_cast<size_t>(N * O), kNaN), {N, O}, c.act);
  const OwnedTensor nan_dinp = make(std::vector<float>(static_cast<size_t>(N * I), kNaN), {N, I}, c.act);
  const OffsetTensor out_d = to_device_at(nan_out, offset), dinp_d = to_device_at(nan_dinp, offset);
  zt::ops::linear_forward(out_d.view, x_d.view, w_d.view, c.bias ? b_d.view : Tensor{}, c.layout);
  zt::ops::linear_backward(dinp_d.view, dw_d.view, db_d.view, dy_d.view, x_d.view, w_d.view, c.layout);

  const double tol_act = exact_f32 ? 1e-5 : 1e-2;
  const double tol_grad = (c.act == DType::F32 && c.grad == DType::F32) ? 1e-5 : 1e-2;
  EXPECT_LE(rel_err(host_values(out_d.view), out_cpu->to_f32_vector()), tol_act) << "out";
  EXPECT_LE(rel_err(host_values(dinp_d.view), dinp_cpu->to_f32_vector()), tol_act) << "dinp";
  EXPECT_LE(rel_err(host_values(dw_d.view), dw_cpu->to_f32_vector()), tol_grad) << "dweight (+=)";
  EXPECT_LE(rel_err(host_values(db_d.view), db_cpu->to_f32_vector()), tol_grad) << "dbias (+=)";
}

class CudaLinear : public ::testing::TestWithParam<LinearCase> {};

TEST_P(CudaLinear, MatchesCpu) {
  ZT_REQUIRE_GPU();
  compare_with_cpu(GetParam());
}

constexpr WeightLayout kOI = WeightLayout::OutIn, kIO = WeightLayout::InOut;
constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16;

std::vector<LinearCase> odd_cases() {
  std::vector<LinearCase> cases;
  const DType combos[][3] = {{F32, F32, F32},  {F32, BF16, BF16}, {F32, F16, F16},   {BF16, BF16, BF16},
                             {BF16, F32, F32}, {BF16, F16, F16},  {F32, BF16, F32},  {BF16, BF16, F32},
                             {F32, F32, BF16}, {F32, F32, F16},   {BF16, F32, BF16}, {F32, F16, F32}};
  for (const auto& t : combos)
    for (WeightLayout l : {kOI, kIO}) cases.push_back({37, 19, 23, l, t[0], t[1], t[2], true});
  for (WeightLayout l : {kOI, kIO}) {
    cases.push_back({37, 19, 23, l, F32, F32, F32, false});
    cases.push_back({37, 19, 23, l, BF16, BF16, BF16, false});
    cases.push_back({1, 1, 1, l, F32, F32, F32, true});
    cases.push_back({3, 1, 5, l, BF16, BF16, BF16, true});
    cases.push_back({5, 8, 1, l, F32, F32, F32, true});
    cases.push_back({130, 65, 257, l, F32, F32, F32, true});
    cases.push_back({130, 65, 257, l, BF16, BF16, BF16, true});
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Odd, CudaLinear, ::testing::ValuesIn(odd_cases()), case_name);

// GPT-2 sizes: c_attn (768 -> 2304, Conv1D InOut), the XL MLP (1600 -> 6400 -> 1600).
INSTANTIATE_TEST_SUITE_P(Real, CudaLinear,
                         ::testing::Values(LinearCase{512, 768, 2304, kIO, F32, F32, F32, true},
                                           LinearCase{512, 768, 2304, kIO, BF16, BF16, BF16, true},
                                           LinearCase{512, 768, 2304, kOI, F32, BF16, BF16, true},
                                           LinearCase{512, 768, 2304, kOI, BF16, F32, F32, true},
                                           LinearCase{256, 1600, 6400, kIO, F32, F32, F32, true},
                                           LinearCase{256, 1600, 6400, kIO, BF16, BF16, BF16, true},
                                           LinearCase{256, 6400, 1600, kOI, BF16, BF16, BF16, true},
                                           LinearCase{256, 6400, 1600, kOI, F32, F32, F32, false}),
                         case_name);

// Views at odd element offsets (only 4- or 2-byte aligned): cuBLASLt must be told the real
// alignment; the bias is copied to aligned scratch for the epilogue.
TEST(CudaLinearViews, MisalignedViewsMatchCpu) {
  ZT_REQUIRE_GPU();
  for (WeightLayout l : {kOI, kIO}) {
    compare_with_cpu({37, 19, 23, l, F32, F32, F32, true}, 1);
    compare_with_cpu({37, 19, 23, l, BF16, BF16, BF16, true}, 1);
    compare_with_cpu({64, 128, 96, l, BF16, BF16, BF16, true}, 3);
    compare_with_cpu({64, 128, 96, l, F32, BF16, BF16, true}, 1);
  }
}

// Activations with leading dimensions [B, T, features] are read as [B*T, features].
TEST(CudaLinearShapes, LeadingDimensionsAreRows) {
  ZT_REQUIRE_GPU();
  const int64_t B = 2, T = 5, I = 12, O = 7;
  const auto x = randn(static_cast<size_t>(B * T * I), 1);
  const OwnedTensor w = make(randn(static_cast<size_t>(O * I), 2), {O, I});
  const OwnedTensor b = make(randn(static_cast<size_t>(O), 3), {O});
  OwnedTensor out_cpu({B * T, O}, F32);
  zt::ops::linear_forward(out_cpu, make(x, {B * T, I}), w, b);
  const OwnedTensor x_d = to_device(make(x, {B, T, I})), w_d = to_device(w), b_d = to_device(b);
  const OwnedTensor out_d = device_nan({B, T, O}, F32);
  zt::ops::linear_forward(out_d, x_d, w_d, b_d);
  EXPECT_LE(rel_err(host_values(out_d), out_cpu->to_f32_vector()), 1e-5);
}

// Degenerate sizes the ops/ wrapper lets through: N = 0 does nothing (dweight unchanged);
// I = 0 with only dbias requested still sums the columns of dout.
TEST(CudaLinearShapes, EmptyDimensions) {
  ZT_REQUIRE_GPU();
  for (WeightLayout l : {kOI, kIO}) {
    const bool in_out = l == kIO;
    {  // N = 0
      const int64_t N = 0, I = 3, O = 2;
      const OwnedTensor w = make(randn(static_cast<size_t>(O * I), 5), in_out ? Shape{I, O} : Shape{O, I});
      const OwnedTensor dw_d = to_device(w), db_d = to_device(make({1.0f, 2.0f}, {O}));
      zt::ops::linear_forward(to_device(OwnedTensor({N, O}, F32)), to_device(OwnedTensor({N, I}, F32)), to_device(w),
                              Tensor{}, l);
      zt::ops::linear_backward(to_device(OwnedTensor({N, I}, F32)), dw_d, db_d, to_device(OwnedTensor({N, O}, F32)),
                               to_device(OwnedTensor({N, I}, F32)), to_device(w), l);
      EXPECT_EQ(host_values(dw_d), w->to_f32_vector());
      EXPECT_EQ(host_values(db_d), (std::vector<float>{1.0f, 2.0f}));
    }
    {  // I = 0, dbias only
      const int64_t N = 4, I = 0, O = 3;
      const Shape wshape = in_out ? Shape{I, O} : Shape{O, I};
      const auto dy = randn(static_cast<size_t>(N * O), 4);
      OwnedTensor db_cpu = make({0.25f, 0.5f, -1.0f}, {O});
      const OwnedTensor db_d = to_device(db_cpu);
      zt::ops::linear_backward(Tensor{}, Tensor{}, db_cpu, make(dy, {N, O}), Tensor{}, OwnedTensor(wshape, F32), l);
      zt::ops::linear_backward(Tensor{}, Tensor{}, db_d, to_device(make(dy, {N, O})), Tensor{},
                               to_device(OwnedTensor(wshape, F32)), l);
      EXPECT_LE(rel_err(host_values(db_d), db_cpu->to_f32_vector()), 1e-5);
    }
  }
}

// Two backward calls accumulate: dweight and dbias end at old + 2 * gradient; dinp is
// overwritten (the same both times).
TEST(CudaLinearAccumulation, BackwardTwiceAddsTwice) {
  ZT_REQUIRE_GPU();
  const int64_t N = 33, I = 24, O = 40;
  const auto x = randn(static_cast<size_t>(N * I), 1), dy = randn(static_cast<size_t>(N * O), 2);
  const OwnedTensor w = make(randn(static_cast<size_t>(O * I), 3), {O, I});
  const OwnedTensor x_d = to_device(make(x, {N, I})), dy_d = to_device(make(dy, {N, O})), w_d = to_device(w);
  const OwnedTensor dinp_d = device_nan({N, I}, F32);
  const OwnedTensor dw_once = to_device(OwnedTensor::zeros({O, I}, F32)),
                    db_once = to_device(OwnedTensor::zeros({O}, F32));
  const OwnedTensor dw_twice = to_device(OwnedTensor::zeros({O, I}, F32)),
                    db_twice = to_device(OwnedTensor::zeros({O}, F32));
  zt::ops::linear_backward(dinp_d, dw_once, db_once, dy_d, x_d, w_d);
  const auto dinp1 = host_values(dinp_d);
  zt::ops::linear_backward(dinp_d, dw_twice, db_twice, dy_d, x_d, w_d);
  zt::ops::linear_backward(dinp_d, dw_twice, db_twice, dy_d, x_d, w_d);
  EXPECT_LE(rel_err(host_values(dinp_d), dinp1), 1e-6);
  auto twice = [](std::vector<float> v) {
    for (float& e : v) e *= 2.0f;
    return v;
  };
  EXPECT_LE(rel_err(host_values(dw_twice), twice(host_values(dw_once))), 1e-6);
  EXPECT_LE(rel_err(host_values(db_twice), twice(host_values(db_once))), 1e-6);
}

// cuBLASLt autotuning (cuda::set_gemm_autotune) picks another algorithm, not another
// result: forward, dinp (=) and dweight (+=, from random values, so an accumulation that ran
// once per timed candidate would show) agree with the heuristic's algorithm, for bf16 and
// f32, at sizes above the tuning threshold (2 N I O >= 1e9). Then a tuned second call of
// the same problem (the cached algorithm) gives the same bits as the first.
TEST(CudaGemmAutotune, SameResultsAsTheHeuristicAndAccumulatesOnce) {
  ZT_REQUIRE_GPU();
  const int64_t N = 512, I = 1024, O = 1536;  // 2 N I O = 1.6e9
  for (DType dt : {DType::BF16, F32}) {
    const auto x = randn(static_cast<size_t>(N * I), 11), dy = randn(static_cast<size_t>(N * O), 12);
    const auto w = randn(static_cast<size_t>(O * I), 13), dw0 = randn(static_cast<size_t>(O * I), 14);
    const OwnedTensor x_d = to_device(make(x, {N, I}, dt)), dy_d = to_device(make(dy, {N, O}, dt));
    const OwnedTensor w_d = to_device(make(w, {O, I}, dt));
    struct Outputs {
      std::vector<float> y, dinp, dw;
    };
    auto run = [&](bool tune) {
      zt::cuda::set_gemm_autotune(tune);
      const OwnedTensor y = device_nan({N, O}, dt), dinp = device_nan({N, I}, dt);
      const OwnedTensor dw = to_device(make(dw0, {O, I}, dt));
      zt::ops::linear_forward(y, x_d, w_d, Tensor{});
      zt::ops::linear_backward(dinp, dw, Tensor{}, dy_d, x_d, w_d);
      return Outputs{host_values(y), host_values(dinp), host_values(dw)};
    };
    const Outputs heuristic = run(false), tuned = run(true), tuned_again = run(true);
    zt::cuda::set_gemm_autotune(false);
    const double tol = dt == F32 ? 1e-5 : 1e-2;
    EXPECT_LE(rel_err(tuned.y, heuristic.y), tol) << zt::dtype_name(dt);
    EXPECT_LE(rel_err(tuned.dinp, heuristic.dinp), tol) << zt::dtype_name(dt);
    EXPECT_LE(rel_err(tuned.dw, heuristic.dw), tol) << zt::dtype_name(dt);
    EXPECT_EQ(tuned.y, tuned_again.y) << zt::dtype_name(dt);
    EXPECT_EQ(tuned.dw, tuned_again.dw) << zt::dtype_name(dt);
  }
}

}  // namespace
