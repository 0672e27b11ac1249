// CUDA LayerNorm / RMSNorm against the CPU backend: forward (out, mean, rstd) and backward
// (dinp, dweight, dbias) for f32 and bf16 activations, f32/bf16/f16 parameters and
// gradients, odd and real sizes; the accumulation rule (pre-filled gradients come out as
// old + new); run-to-run determinism; dinp aliasing dout; unaligned views (scalar path).
//
// Tolerances, as max|gpu - cpu| / max|cpu| per output: 1e-5 when the output and every
// input are f32 (both sides compute in f32; only the order of the sums differs); 1e-2 when
// the output is bf16/f16 (one rounding of the result, 2^-9 relative) — the CPU always gets
// the same bf16-rounded inputs as the GPU. Saved statistics are f32: always 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/norm.h"

namespace {

using zt::Device;
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::Tensor;
using zt::testing::make;
using zt::testing::randn;
using zt::testing::to_device;
using zt::testing::to_host;

constexpr float kEps = 1e-5f;
constexpr double kF32Tol = 1e-5;
constexpr double kLowPrecisionTol = 1e-2;

double tol_for(DType out) { return out == DType::F32 ? kF32Tol : kLowPrecisionTol; }

// One input: the values rounded to the GPU's dtype, as a CPU tensor of cpu_dtype and as a
// device tensor of gpu_dtype (so both backends see the same numbers).
struct Input {
  OwnedTensor cpu;
  OwnedTensor gpu;
};
Input input(const std::vector<float>& v, const Shape& shape, DType gpu_dtype, DType cpu_dtype) {
  const OwnedTensor rounded = make(v, shape, gpu_dtype);
  return {make(rounded->to_f32_vector(), shape, cpu_dtype), to_device(rounded)};
}

// A device output pre-filled with NaN: an element the kernel forgets to write shows up.
OwnedTensor nan_output(const Shape& shape, DType dtype) {
  const std::vector<float> nan(static_cast<size_t>(zt::shape_numel(shape)), std::numeric_limits<float>::quiet_NaN());
  return to_device(make(nan, shape, dtype));
}

// Checks max|gpu - cpu| / max|cpu| <= tol and that both are finite.
void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  const std::vector<float> got = to_host(gpu)->to_f32_vector();
  const std::vector<float> want = cpu.to_f32_vector();
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": GPU value " << got[i] << " at " << i;
    ASSERT_TRUE(std::isfinite(want[i])) << what << ": CPU value " << want[i] << " at " << i;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  const double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
  EXPECT_LE(rel, tol) << what << ": max|diff| " << max_diff << ", max|ref| " << max_ref;
}

// Bitwise equality of two device tensors.
void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  const OwnedTensor ha = to_host(a), hb = to_host(b);
  ASSERT_EQ(ha->nbytes(), hb->nbytes());
  EXPECT_EQ(std::memcmp(ha->data(), hb->data(), ha->nbytes()), 0) << what;
}

// Rows with a nonzero mean and unequal scales, so that the mean subtraction matters.
std::vector<float> activations(int64_t N, int64_t C, uint32_t seed) {
  std::vector<float> x = randn(static_cast<size_t>(N * C), seed, 1.5f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) x[static_cast<size_t>(n * C + c)] += 2.0f * std::sin(static_cast<float>(n)) - 0.5f;
  return x;
}
std::vector<float> gains(int64_t C, uint32_t seed) {
  std::vector<float> w = randn(static_cast<size_t>(C), seed, 0.2f);
  for (float& v : w) v += 1.0f;
  return w;
}

struct NormCase {
  int64_t N, C;
  DType act;    // inp/out/dout/dinp on the GPU
  DType param;  // weight/bias
  DType grad;   // dweight/dbias
  bool bias;
};

std::string case_name(const ::testing::TestParamInfo<NormCase>& info) {
  const NormCase& c = info.param;
  return "N" + std::to_string(c.N) + "_C" + std::to_string(c.C) + "_" + zt::dtype_name(c.act) + "_w" +
         zt::dtype_name(c.param) + "_g" + zt::dtype_name(c.grad) + (c.bias ? "" : "_nobias");
}

// Odd sizes (C not a multiple of 8: scalar path; N = 1; C = 3), real widths (768, 1600,
// 2048, 4096), row counts that cut into many chunks of the column sums (1000, 4099), and
// every parameter/gradient dtype with both activation dtypes.
const NormCase kCases[] = {
    {1, 768, DType::F32, DType::F32, DType::F32, true},
    {4, 3, DType::F32, DType::F32, DType::F32, true},
    {3, 7, DType::F32, DType::F32, DType::F32, false},
    {5, 13, DType::F32, DType::BF16, DType::BF16, true},
    {17, 100, DType::BF16, DType::F32, DType::F32, true},
    {64, 768, DType::F32, DType::F32, DType::F32, true},
    {64, 768, DType::BF16, DType::BF16, DType::BF16, true},
    {32, 1600, DType::F32, DType::F16, DType::F32, true},
    {32, 1600, DType::BF16, DType::F16, DType::F16, false},
    {33, 2048, DType::BF16, DType::BF16, DType::F32, true},
    {1000, 768, DType::F32, DType::F32, DType::F32, true},
    {4099, 64, DType::F32, DType::BF16, DType::F16, true},
    {2, 4096, DType::F32, DType::F32, DType::F32, true},
    {1, 2048, DType::BF16, DType::BF16, DType::BF16, true},
    // f16 activations (fp16 training: f16 parameters and gradients too).
    {64, 768, DType::F16, DType::F16, DType::F16, true},
    {33, 1600, DType::F16, DType::F16, DType::F16, false},
    {5, 13, DType::F16, DType::F32, DType::F32, true},
    {17, 2048, DType::F16, DType::BF16, DType::F32, true},
};

class CudaNorm : public ::testing::TestWithParam<NormCase> {};

TEST_P(CudaNorm, LayerNormMatchesCpu) {
  ZT_REQUIRE_GPU();
  const NormCase k = GetParam();
  const Shape act{k.N, k.C}, par{k.C}, stat{k.N};
  const Input x = input(activations(k.N, k.C, 11), act, k.act, DType::F32);
  const Input w = input(gains(k.C, 12), par, k.param, k.param);
  const Input b = input(randn(static_cast<size_t>(k.C), 13, 0.3f), par, k.param, k.param);
  const Input dout = input(randn(static_cast<size_t>(k.N * k.C), 14), act, k.act, DType::F32);
  // Pre-filled parameter gradients: the result must be old + new.
  const Input dw = input(randn(static_cast<size_t>(k.C), 15), par, k.grad, k.grad);
  const Input db = input(randn(static_cast<size_t>(k.C), 16), par, k.grad, k.grad);
  const Tensor cpu_bias = k.bias ? Tensor(b.cpu) : Tensor{};
  const Tensor gpu_bias = k.bias ? Tensor(b.gpu) : Tensor{};
  const Tensor cpu_dbias = k.bias ? Tensor(db.cpu) : Tensor{};
  const Tensor gpu_dbias = k.bias ? Tensor(db.gpu) : Tensor{};

  // Forward.
  OwnedTensor out_c(act, DType::F32), mean_c(stat, DType::F32), rstd_c(stat, DType::F32);
  zt::ops::layernorm_forward(out_c, mean_c, rstd_c, x.cpu, w.cpu, cpu_bias, kEps);
  OwnedTensor out_g = nan_output(act, k.act), mean_g = nan_output(stat, DType::F32),
              rstd_g = nan_output(stat, DType::F32);
  zt::ops::layernorm_forward(out_g, mean_g, rstd_g, x.gpu, w.gpu, gpu_bias, kEps);
  expect_close(out_g, out_c, tol_for(k.act), "out");
  expect_close(mean_g, mean_c, kF32Tol, "mean");
  expect_close(rstd_g, rstd_c, kF32Tol, "rstd");

  // Backward from the CPU's statistics on both sides (the GPU's were checked above).
  const OwnedTensor mean_d = to_device(mean_c), rstd_d = to_device(rstd_c);
  OwnedTensor dinp_c(act, DType::F32);
  zt::ops::layernorm_backward(dinp_c, dw.cpu, cpu_dbias, dout.cpu, x.cpu, w.cpu, mean_c, rstd_c);
  OwnedTensor dinp_g = nan_output(act, k.act);
  zt::ops::layernorm_backward(dinp_g, dw.gpu, gpu_dbias, dout.gpu, x.gpu, w.gpu, mean_d, rstd_d);
  expect_close(dinp_g, dinp_c, tol_for(k.act), "dinp");
  const double gtol = k.act == DType::F32 && k.grad == DType::F32 ? kF32Tol : kLowPrecisionTol;
  expect_close(dw.gpu, dw.cpu, gtol, "dweight");
  if (k.bias) expect_close(db.gpu, db.cpu, gtol, "dbias");
}

TEST_P(CudaNorm, RmsNormMatchesCpu) {
  ZT_REQUIRE_GPU();
  const NormCase k = GetParam();
  const Shape act{k.N, k.C}, par{k.C}, stat{k.N};
  const Input x = input(activations(k.N, k.C, 21), act, k.act, DType::F32);
  const Input w = input(gains(k.C, 22), par, k.param, k.param);
  const Input dout = input(randn(static_cast<size_t>(k.N * k.C), 24), act, k.act, DType::F32);
  const Input dw = input(randn(static_cast<size_t>(k.C), 25), par, k.grad, k.grad);

  OwnedTensor out_c(act, DType::F32), rstd_c(stat, DType::F32);
  zt::ops::rmsnorm_forward(out_c, rstd_c, x.cpu, w.cpu, kEps);
  OwnedTensor out_g = nan_output(act, k.act), rstd_g = nan_output(stat, DType::F32);
  zt::ops::rmsnorm_forward(out_g, rstd_g, x.gpu, w.gpu, kEps);
  expect_close(out_g, out_c, tol_for(k.act), "out");
  expect_close(rstd_g, rstd_c, kF32Tol, "rstd");

  const OwnedTensor rstd_d = to_device(rstd_c);
  OwnedTensor dinp_c(act, DType::F32);
  zt::ops::rmsnorm_backward(dinp_c, dw.cpu, dout.cpu, x.cpu, w.cpu, rstd_c);
  OwnedTensor dinp_g = nan_output(act, k.act);
  zt::ops::rmsnorm_backward(dinp_g, dw.gpu, dout.gpu, x.gpu, w.gpu, rstd_d);
  expect_close(dinp_g, dinp_c, tol_for(k.act), "dinp");
  const double gtol = k.act == DType::F32 && k.grad == DType::F32 ? kF32Tol : kLowPrecisionTol;
  expect_close(dw.gpu, dw.cpu, gtol, "dweight");
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaNorm, ::testing::ValuesIn(kCases), case_name);

// Optional outputs left undefined: forward without mean/rstd, backward with only dinp or
// only the parameter gradients.
TEST(CudaNormOptional, UndefinedOutputsAreSkipped) {
  ZT_REQUIRE_GPU();
  const int64_t N = 9, C = 40;
  const Shape act{N, C}, par{C}, stat{N};
  const Input x = input(activations(N, C, 31), act, DType::F32, DType::F32);
  const Input w = input(gains(C, 32), par, DType::F32, DType::F32);
  const Input b = input(randn(C, 33), par, DType::F32, DType::F32);
  const Input dout = input(randn(N * C, 34), act, DType::F32, DType::F32);

  OwnedTensor out_c(act, DType::F32), mean_c(stat, DType::F32), rstd_c(stat, DType::F32);
  zt::ops::layernorm_forward(out_c, mean_c, rstd_c, x.cpu, w.cpu, b.cpu, kEps);
  OwnedTensor out_g = nan_output(act, DType::F32);
  zt::ops::layernorm_forward(out_g, Tensor{}, Tensor{}, x.gpu, w.gpu, b.gpu, kEps);
  expect_close(out_g, out_c, kF32Tol, "layernorm out without statistics");
  OwnedTensor rms_c(act, DType::F32), rms_g = nan_output(act, DType::F32);
  zt::ops::rmsnorm_forward(rms_c, Tensor{}, x.cpu, w.cpu, kEps);
  zt::ops::rmsnorm_forward(rms_g, Tensor{}, x.gpu, w.gpu, kEps);
  expect_close(rms_g, rms_c, kF32Tol, "rmsnorm out without rstd");

  const OwnedTensor mean_d = to_device(mean_c), rstd_d = to_device(rstd_c);
  // Only dinp.
  OwnedTensor dinp_c(act, DType::F32), dinp_g = nan_output(act, DType::F32);
  zt::ops::layernorm_backward(dinp_c, Tensor{}, Tensor{}, dout.cpu, x.cpu, w.cpu, mean_c, rstd_c);
  zt::ops::layernorm_backward(dinp_g, Tensor{}, Tensor{}, dout.gpu, x.gpu, w.gpu, mean_d, rstd_d);
  expect_close(dinp_g, dinp_c, kF32Tol, "layernorm dinp alone");
  // Only dbias (dweight undefined), then only dweight for RMSNorm.
  OwnedTensor db_c = OwnedTensor::zeros(par, DType::F32);
  OwnedTensor db_g = to_device(db_c);
  zt::ops::layernorm_backward(Tensor{}, Tensor{}, db_c, dout.cpu, x.cpu, w.cpu, mean_c, rstd_c);
  zt::ops::layernorm_backward(Tensor{}, Tensor{}, db_g, dout.gpu, x.gpu, w.gpu, mean_d, rstd_d);
  expect_close(db_g, db_c, kF32Tol, "layernorm dbias alone");
  OwnedTensor dw_c = OwnedTensor::zeros(par, DType::F32);
  OwnedTensor dw_g = to_device(dw_c);
  zt::ops::rmsnorm_backward(Tensor{}, dw_c, dout.cpu, x.cpu, w.cpu, rstd_c);
  zt::ops::rmsnorm_backward(Tensor{}, dw_g, dout.gpu, x.gpu, w.gpu, rstd_d);
  expect_close(dw_g, dw_c, kF32Tol, "rmsnorm dweight alone");
}

// The same call twice from the same state gives the same bits; from zero, two calls give
// exactly twice one call (acc + acc is exact), i.e. the gradient is accumulated.
TEST(CudaNormDeterminism, BackwardIsDeterministicAndAccumulates) {
  ZT_REQUIRE_GPU();
  const int64_t N = 3000, C = 768;
  const Shape act{N, C}, par{C}, stat{N};
  const Input x = input(activations(N, C, 41), act, DType::F32, DType::F32);
  const Input w = input(gains(C, 42), par, DType::F32, DType::F32);
  const Input dout = input(randn(N * C, 44), act, DType::F32, DType::F32);
  OwnedTensor mean(stat, DType::F32, Device::cuda()), rstd(stat, DType::F32, Device::cuda());
  OwnedTensor out(act, DType::F32, Device::cuda());
  zt::ops::layernorm_forward(out, mean, rstd, x.gpu, w.gpu, Tensor{}, kEps);

  auto run = [&](int calls, OwnedTensor& dw, OwnedTensor& db, OwnedTensor& dinp) {
    dw = OwnedTensor::zeros(par, DType::F32, Device::cuda());
    db = OwnedTensor::zeros(par, DType::F32, Device::cuda());
    dinp = OwnedTensor(act, DType::F32, Device::cuda());
    for (int i = 0; i < calls; ++i) zt::ops::layernorm_backward(dinp, dw, db, dout.gpu, x.gpu, w.gpu, mean, rstd);
  };
  OwnedTensor dw1, db1, dx1, dw2, db2, dx2, dw_twice, db_twice, dx_twice;
  run(1, dw1, db1, dx1);
  run(1, dw2, db2, dx2);
  expect_same_bits(dw1, dw2, "dweight run to run");
  expect_same_bits(db1, db2, "dbias run to run");
  expect_same_bits(dx1, dx2, "dinp run to run");
  run(2, dw_twice, db_twice, dx_twice);
  const std::vector<float> one = to_host(dw1)->to_f32_vector(), two = to_host(dw_twice)->to_f32_vector();
  const std::vector<float> b1 = to_host(db1)->to_f32_vector(), b2 = to_host(db_twice)->to_f32_vector();
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(two[i], 2.0f * one[i]) << "dweight after two calls at " << i;
    ASSERT_EQ(b2[i], 2.0f * b1[i]) << "dbias after two calls at " << i;
  }
  expect_same_bits(dx_twice, dx1, "dinp is overwritten, not accumulated");
}

// The fused residual add + norm against the GPU's own ops::add then the norm: the same bits
// (f32 and bf16, the 16-byte and the scalar path, res apart from a and res = a in place).
TEST(CudaNormResidual, AddNormIsAddThenNorm) {
  ZT_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t C : {int64_t{2048}, int64_t{100}})
      for (bool layernorm : {true, false})
        for (bool in_place : {false, true}) {
          const int64_t N = 37;
          const Shape act{N, C}, par{C}, stat{N};
          const Input a = input(activations(N, C, 71), act, dt, DType::F32);
          const Input b = input(randn(static_cast<size_t>(N * C), 72), act, dt, DType::F32);
          const Input w = input(gains(C, 73), par, DType::BF16, DType::BF16);
          const Input bias = input(randn(static_cast<size_t>(C), 74, 0.3f), par, DType::BF16, DType::BF16);
          const auto dev = Device::cuda();
          OwnedTensor ref_res(act, dt, dev), ref_out(act, dt, dev), ref_mean(stat, DType::F32, dev),
              ref_rstd(stat, DType::F32, dev);
          zt::ops::add(ref_res, a.gpu, b.gpu);
          OwnedTensor res(act, dt, dev), out = nan_output(act, dt), mean = nan_output(stat, DType::F32),
                                         rstd = nan_output(stat, DType::F32);
          const Tensor r = in_place ? a.gpu.view() : res.view();
          if (layernorm) {
            zt::ops::layernorm_forward(ref_out, ref_mean, ref_rstd, ref_res, w.gpu, bias.gpu, kEps);
            zt::ops::add_layernorm_forward(r, out, mean, rstd, a.gpu, b.gpu, w.gpu, bias.gpu, kEps);
            expect_same_bits(mean, ref_mean, "mean");
          } else {
            zt::ops::rmsnorm_forward(ref_out, ref_rstd, ref_res, w.gpu, kEps);
            zt::ops::add_rmsnorm_forward(r, out, rstd, a.gpu, b.gpu, w.gpu, kEps);
          }
          const std::string what = std::string(layernorm ? "layernorm" : "rmsnorm") + " " + zt::dtype_name(dt) +
                                   " C=" + std::to_string(C) + (in_place ? " in place" : "");
          expect_same_bits(r, ref_res, what + ": res");
          expect_same_bits(out, ref_out, what + ": out");
          expect_same_bits(rstd, ref_rstd, what + ": rstd");
        }
}

// GradWrite::Accumulate: dinp comes out as old + the CPU's overwritten dinp (f32 and bf16
// activations; bf16 rounds once, after the add).
TEST(CudaNormAccumulate, DinpAddsToTheOldValue) {
  ZT_REQUIRE_GPU();
  for (DType act_dtype : {DType::F32, DType::BF16, DType::F16})
    for (bool layernorm : {true, false}) {
      const int64_t N = 70, C = 2048;
      const Shape act{N, C}, par{C}, stat{N};
      const Input x = input(activations(N, C, 61), act, act_dtype, DType::F32);
      const Input w = input(gains(C, 62), par, DType::BF16, DType::BF16);
      const Input dout = input(randn(N * C, 64), act, act_dtype, DType::F32);
      const Input old = input(randn(N * C, 65, 3.0f), act, act_dtype, DType::F32);
      OwnedTensor mean_c(stat, DType::F32), rstd_c(stat, DType::F32), out_c(act, DType::F32), dinp_c(act, DType::F32);
      if (layernorm) {
        zt::ops::layernorm_forward(out_c, mean_c, rstd_c, x.cpu, w.cpu, Tensor{}, kEps);
        zt::ops::layernorm_backward(dinp_c, Tensor{}, Tensor{}, dout.cpu, x.cpu, w.cpu, mean_c, rstd_c);
        zt::ops::layernorm_backward(old.gpu, Tensor{}, Tensor{}, dout.gpu, x.gpu, w.gpu, to_device(mean_c),
                                    to_device(rstd_c), zt::GradWrite::Accumulate);
      } else {
        zt::ops::rmsnorm_forward(out_c, rstd_c, x.cpu, w.cpu, kEps);
        zt::ops::rmsnorm_backward(dinp_c, Tensor{}, dout.cpu, x.cpu, w.cpu, rstd_c);
        zt::ops::rmsnorm_backward(old.gpu, Tensor{}, dout.gpu, x.gpu, w.gpu, to_device(rstd_c),
                                  zt::GradWrite::Accumulate);
      }
      std::vector<float> want = old.cpu->to_f32_vector();
      const std::vector<float> fresh = dinp_c->to_f32_vector();
      for (size_t i = 0; i < want.size(); ++i) want[i] += fresh[i];
      expect_close(
          old.gpu, make(want, act), tol_for(act_dtype),
          std::string(layernorm ? "layernorm" : "rmsnorm") + " accumulated dinp, " + zt::dtype_name(act_dtype));
    }
}

// dinp may alias dout (as on the CPU): the parameter gradients still see the old dout.
TEST(CudaNormAliasing, DinpMayAliasDout) {
  ZT_REQUIRE_GPU();
  for (bool layernorm : {true, false}) {
    const int64_t N = 70, C = 1600;
    const Shape act{N, C}, par{C}, stat{N};
    const Input x = input(activations(N, C, 51), act, DType::BF16, DType::F32);
    const Input w = input(gains(C, 52), par, DType::BF16, DType::BF16);
    const Input dout = input(randn(N * C, 54), act, DType::BF16, DType::F32);
    const Input dw = input(randn(C, 55), par, DType::F32, DType::F32);
    OwnedTensor mean_c(stat, DType::F32), rstd_c(stat, DType::F32), out_c(act, DType::F32);
    OwnedTensor dinp_c(act, DType::F32);
    if (layernorm) {
      zt::ops::layernorm_forward(out_c, mean_c, rstd_c, x.cpu, w.cpu, Tensor{}, kEps);
      zt::ops::layernorm_backward(dinp_c, dw.cpu, Tensor{}, dout.cpu, x.cpu, w.cpu, mean_c, rstd_c);
      zt::ops::layernorm_backward(dout.gpu, dw.gpu, Tensor{}, dout.gpu, x.gpu, w.gpu, to_device(mean_c),
                                  to_device(rstd_c));
    } else {
      zt::ops::rmsnorm_forward(out_c, rstd_c, x.cpu, w.cpu, kEps);
      zt::ops::rmsnorm_backward(dinp_c, dw.cpu, dout.cpu, x.cpu, w.cpu, rstd_c);
      zt::ops::rmsnorm_backward(dout.gpu, dw.gpu, dout.gpu, x.gpu, w.gpu, to_device(rstd_c));
    }
    const std::string which = layernorm ? "layernorm " : "rmsnorm ";
    expect_close(dout.gpu, dinp_c, kLowPrecisionTol, which + "dinp in place of dout");
    // bf16 inputs, f32 gradient: only the order of the f32 sums differs.
    expect_close(dw.gpu, dw.cpu, kF32Tol, which + "dweight with dinp aliasing dout");
  }
}

// C a multiple of 8 but pointers off 16-byte alignment: the scalar path, same results.
TEST(CudaNormAlignment, UnalignedViewsMatchCpu) {
  ZT_REQUIRE_GPU();
  const int64_t N = 12, C = 256;
  const Shape act{N, C}, par{C}, stat{N};
  const std::vector<float> xv = activations(N, C, 61), dv = randn(N * C, 64);
  const Input w = input(gains(C, 62), par, DType::F32, DType::F32);
  // Device buffers one element longer, viewed from element 1.
  auto shifted = [&](const std::vector<float>& v) {
    std::vector<float> padded(v.size() + 1, 0.0f);
    std::copy(v.begin(), v.end(), padded.begin() + 1);
    return to_device(make(padded, {static_cast<int64_t>(padded.size())}));
  };
  const OwnedTensor xbuf = shifted(xv), dbuf = shifted(dv), obuf = shifted(std::vector<float>(N * C, NAN)),
                    gbuf = shifted(std::vector<float>(N * C, NAN));
  auto view = [&](const OwnedTensor& buf) {
    return Tensor(static_cast<float*>(buf->data()) + 1, act, DType::F32, Device::cuda());
  };
  const Tensor x_g = view(xbuf), d_g = view(dbuf), out_g = view(obuf), dinp_g = view(gbuf);
  const OwnedTensor x_c = make(xv, act), d_c = make(dv, act);

  OwnedTensor out_c(act, DType::F32), rstd_c(stat, DType::F32);
  OwnedTensor rstd_g(stat, DType::F32, Device::cuda());
  zt::ops::rmsnorm_forward(out_c, rstd_c, x_c, w.cpu, kEps);
  zt::ops::rmsnorm_forward(out_g, rstd_g, x_g, w.gpu, kEps);
  expect_close(out_g, out_c, kF32Tol, "unaligned rmsnorm out");
  expect_close(rstd_g, rstd_c, kF32Tol, "unaligned rmsnorm rstd");

  OwnedTensor dinp_c(act, DType::F32);
  OwnedTensor dw_c = OwnedTensor::zeros(par, DType::F32);
  OwnedTensor dw_g = to_device(dw_c);
  zt::ops::rmsnorm_backward(dinp_c, dw_c, d_c, x_c, w.cpu, rstd_c);
  zt::ops::rmsnorm_backward(dinp_g, dw_g, d_g, x_g, w.gpu, to_device(rstd_c));
  expect_close(dinp_g, dinp_c, kF32Tol, "unaligned rmsnorm dinp");
  expect_close(dw_g, dw_c, kF32Tol, "unaligned rmsnorm dweight");
}

// The CPU still takes only f32 activations; bf16 is a CUDA-only relaxation.
TEST(CudaNormDtypes, Bf16ActivationsOnlyOnCuda) {
  const Shape act{2, 8}, par{8}, stat{2};
  OwnedTensor x(act, DType::BF16), out(act, DType::BF16), w(par, DType::F32), rstd(stat, DType::F32);
  EXPECT_THROW(zt::ops::rmsnorm_forward(out, rstd, x, w, kEps), zt::Error);
}

}  // namespace
