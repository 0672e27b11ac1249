// CUDA causal GQA attention (backend/cuda/attention.cu) against the CPU op, through the
// ops/attention.h wrapper: out, lse and dqkv for f32 and bf16 activations over head dims
// 8..128, sequence lengths 1..1024 (partial tiles, many tiles), MHA, GQA and MQA, batch 1 and
// 3. Also: outputs are fully overwritten, results are bitwise reproducible, memory is O(T)
// (no T x T buffer), unsupported head dims and dtypes are clear errors.
//
// Error measure: max |gpu - cpu| / max |cpu| over the tensor (rounding of values that come
// out of cancellation is relative to the tensor's scale, not to the value).
// f32: <= 1e-5 (both sides are f32 with different summation orders; ~1e-6 expected).
// bf16: the CPU runs in f32 on the same bf16-rounded inputs; out and dqkv are stored in
// bf16 (relative rounding 2^-9), so <= 2e-2; lse is f32 on both sides: <= 1e-5.
// The backward of both sides takes the same inputs: the GPU forward's out and lse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda_api.h"
#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace zt {
namespace {

using testing::make;
using testing::randn;
using testing::to_device;
using testing::to_host;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  int64_t B, T, Hq, Hkv, D;
  int64_t row() const { return (Hq + 2 * Hkv) * D; }
  Shape qkv_shape() const { return {B, T, row()}; }
  Shape out_shape() const { return {B, T, Hq * D}; }
  Shape lse_shape() const { return {B, Hq, T}; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
  std::string str() const {
    return "B" + std::to_string(B) + "_T" + std::to_string(T) + "_Hq" + std::to_string(Hq) + "_Hkv" +
           std::to_string(Hkv) + "_D" + std::to_string(D);
  }
};

// max |a - b| / max |b|; infinite when a has a NaN or infinity.
double scaled_error(const Tensor& got, const Tensor& ref) {
  const std::vector<float> a = got.to_f32_vector();
  const std::vector<float> b = ref.to_f32_vector();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

// A host f32 copy of a host tensor of any floating dtype.
OwnedTensor as_f32(const Tensor& host) {
  OwnedTensor f(host.shape(), DType::F32);
  f->copy_from(host);
  return f;
}

// A device tensor of the shape and dtype, every element `value` (NaN: must be overwritten).
OwnedTensor device_filled(const Shape& shape, DType dt, float value) {
  OwnedTensor h(shape, dt);
  h->fill_f32(value);
  return to_device(h);
}

// Random qkv and dout, already representable in dt (so the CPU sees the GPU's inputs).
struct Inputs {
  std::vector<float> qkv, dout;
};
Inputs random_inputs(const Case& c, DType dt, uint32_t seed, float qkv_sd = 1.0f) {
  Inputs in{randn(static_cast<size_t>(shape_numel(c.qkv_shape())), seed, qkv_sd),
            randn(static_cast<size_t>(shape_numel(c.out_shape())), seed + 7919)};
  if (dt == DType::BF16) {
    for (float& x : in.qkv) x = to_f32(to_bf16(x));
    for (float& x : in.dout) x = to_f32(to_bf16(x));
  } else if (dt == DType::F16) {
    for (float& x : in.qkv) x = to_f32(to_f16(x));
    for (float& x : in.dout) x = to_f32(to_f16(x));
  }
  return in;
}

// Host copies of one GPU forward + backward (out, dqkv in dt; lse f32).
struct GpuResult {
  OwnedTensor out, lse, dqkv;
};
GpuResult run_gpu(const Case& c, const Inputs& in, DType dt) {
  const int hq = static_cast<int>(c.Hq), hkv = static_cast<int>(c.Hkv);
  OwnedTensor qkv = to_device(make(in.qkv, c.qkv_shape(), dt));
  OwnedTensor dout = to_device(make(in.dout, c.out_shape(), dt));
  OwnedTensor out = device_filled(c.out_shape(), dt, kNaN);
  OwnedTensor lse = device_filled(c.lse_shape(), DType::F32, kNaN);
  OwnedTensor dqkv = device_filled(c.qkv_shape(), dt, kNaN);
  ops::attention_forward(out, lse, qkv, hq, hkv, c.scale());
  ops::attention_backward(dqkv, dout, qkv, out, lse, hq, hkv, c.scale());
  return {to_host(out), to_host(lse), to_host(dqkv)};
}

struct Errors {
  double out, lse, dqkv;
};

// GPU vs CPU on the same inputs; the CPU backward takes the GPU's out and lse.
Errors compare_with_cpu(const Case& c, const Inputs& in, DType dt) {
  const int hq = static_cast<int>(c.Hq), hkv = static_cast<int>(c.Hkv);
  const GpuResult gpu = run_gpu(c, in, dt);

  OwnedTensor qkv = make(in.qkv, c.qkv_shape());
  OwnedTensor dout = make(in.dout, c.out_shape());
  OwnedTensor out(c.out_shape(), DType::F32), lse(c.lse_shape(), DType::F32), dqkv(c.qkv_shape(), DType::F32);
  ops::attention_forward(out, lse, qkv, hq, hkv, c.scale());
  OwnedTensor gpu_out = as_f32(gpu.out);
  ops::attention_backward(dqkv, dout, qkv, gpu_out, gpu.lse, hq, hkv, c.scale());

  const Errors e{scaled_error(gpu.out, out), scaled_error(gpu.lse, lse), scaled_error(gpu.dqkv, dqkv)};
  std::printf("cuda attention %s %s: out %.2e lse %.2e dqkv %.2e\n", dtype_name(dt), c.str().c_str(), e.out, e.lse,
              e.dqkv);
  return e;
}

// ---- GPU vs CPU over the shape grid -------------------------------------------------

class CudaAttentionVsCpu : public ::testing::TestWithParam<std::tuple<Case, DType>> {};

TEST_P(CudaAttentionVsCpu, ForwardAndBackward) {
  ZT_REQUIRE_GPU();
  const Case c = std::get<0>(GetParam());
  const DType dt = std::get<1>(GetParam());
  // f16 keeps 3 more mantissa bits than bf16: its outputs (and P, dS on tensor cores) round
  // 8x finer.
  const double tol = dt == DType::F32 ? 1e-5 : dt == DType::F16 ? 1e-2 : 2e-2;
  const uint32_t seed = static_cast<uint32_t>(c.B * 1000003 + c.T * 1009 + c.Hq * 101 + c.Hkv * 11 + c.D);
  const Errors e = compare_with_cpu(c, random_inputs(c, dt, seed), dt);
  EXPECT_LE(e.out, tol) << "out";
  EXPECT_LE(e.lse, 1e-5) << "lse";
  EXPECT_LE(e.dqkv, tol) << "dqkv";
}

std::vector<Case> grid_cases() {
  std::vector<Case> cases;
  for (int64_t D : {8, 16, 32, 64, 128})
    for (int64_t T : {1, 7, 64, 129, 1024}) {
      const int64_t B = T <= 129 ? 3 : 1;
      cases.push_back({B, T, 4, 4, D});  // MHA
      cases.push_back({B, T, 8, 2, D});  // GQA
    }
  cases.push_back({3, 1024, 8, 2, 128});  // the real shape, batched
  cases.push_back({1, 1024, 4, 1, 64});   // MQA
  cases.push_back({2, 77, 4, 2, 5});      // head dims that are not a multiple of 4 or 32
  cases.push_back({1, 200, 2, 1, 100});
  cases.push_back({1, 130, 2, 2, 48});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionVsCpu,
                         ::testing::Combine(::testing::ValuesIn(grid_cases()),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16)),
                         [](const ::testing::TestParamInfo<CudaAttentionVsCpu::ParamType>& info) {
                           return std::get<0>(info.param).str() + "_" + dtype_name(std::get<1>(info.param));
                         });

// ---- other properties ---------------------------------------------------------------

// Sharp softmaxes (scores ~4x larger, probabilities near 0/1) exercise the online max.
// The absolute rounding error of a score, which is the relative error of its probability,
// grows with |q| |k|: tolerance 3e-5 instead of 1e-5.
TEST(CudaAttention, SharpSoftmaxF32) {
  ZT_REQUIRE_GPU();
  const Case c{2, 300, 4, 2, 64};
  const Errors e = compare_with_cpu(c, random_inputs(c, DType::F32, 4242, 2.0f), DType::F32);
  EXPECT_LE(e.out, 3e-5);
  EXPECT_LE(e.lse, 1e-5);
  EXPECT_LE(e.dqkv, 3e-5);
}

TEST(CudaAttention, BitwiseReproducible) {
  ZT_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    const Case c{2, 300, 8, 2, 64};
    const Inputs in = random_inputs(c, dt, 77);
    const GpuResult a = run_gpu(c, in, dt);
    const GpuResult b = run_gpu(c, in, dt);
    EXPECT_EQ(std::memcmp(a.out->data(), b.out->data(), a.out->nbytes()), 0) << dtype_name(dt);
    EXPECT_EQ(std::memcmp(a.lse->data(), b.lse->data(), a.lse->nbytes()), 0) << dtype_name(dt);
    EXPECT_EQ(std::memcmp(a.dqkv->data(), b.dqkv->data(), a.dqkv->nbytes()), 0) << dtype_name(dt);
  }
}

// No T x T buffer: forward + backward at T = 4096 allocate only O(B Hq T) scratch. The bound
// T * T bytes is below any T x T matrix of 1-byte or larger elements. Also checks this long
// sequence (64 query tiles, 128 key tiles) against the CPU.
TEST(CudaAttention, MemoryIsLinearInT) {
  ZT_REQUIRE_GPU();
  const Case c{1, 4096, 4, 2, 64};
  const int hq = static_cast<int>(c.Hq), hkv = static_cast<int>(c.Hkv);
  const Inputs in = random_inputs(c, DType::F32, 4096);
  OwnedTensor qkv = to_device(make(in.qkv, c.qkv_shape()));
  OwnedTensor dout = to_device(make(in.dout, c.out_shape()));
  OwnedTensor out = device_filled(c.out_shape(), DType::F32, kNaN);
  OwnedTensor lse = device_filled(c.lse_shape(), DType::F32, kNaN);
  OwnedTensor dqkv = device_filled(c.qkv_shape(), DType::F32, kNaN);
  cuda::synchronize();
  const size_t base = cuda::bytes_in_use();
  cuda::reset_peak_bytes();
  ops::attention_forward(out, lse, qkv, hq, hkv, c.scale());
  ops::attention_backward(dqkv, dout, qkv, out, lse, hq, hkv, c.scale());
  cuda::synchronize();
  const size_t growth = cuda::peak_bytes() - base;
  std::printf("cuda attention T=%lld: peak growth %zu bytes (T*T = %lld)\n", static_cast<long long>(c.T), growth,
              static_cast<long long>(c.T * c.T));
  EXPECT_LT(growth, static_cast<size_t>(c.T * c.T));
  EXPECT_EQ(cuda::bytes_in_use(), base) << "scratch not returned";

  OwnedTensor qkv_c = make(in.qkv, c.qkv_shape());
  OwnedTensor dout_c = make(in.dout, c.out_shape());
  OwnedTensor out_c(c.out_shape(), DType::F32), lse_c(c.lse_shape(), DType::F32), dqkv_c(c.qkv_shape(), DType::F32);
  ops::attention_forward(out_c, lse_c, qkv_c, hq, hkv, c.scale());
  const OwnedTensor out_g = to_host(out), lse_g = to_host(lse);
  ops::attention_backward(dqkv_c, dout_c, qkv_c, out_g, lse_g, hq, hkv, c.scale());
  EXPECT_LE(scaled_error(out_g, out_c), 1e-5);
  EXPECT_LE(scaled_error(lse_g, lse_c), 1e-5);
  EXPECT_LE(scaled_error(to_host(dqkv), dqkv_c), 1e-5);
}

TEST(CudaAttention, HeadDimAbove128IsUnsupported) {
  ZT_REQUIRE_GPU();
  const Case c{1, 8, 2, 1, 160};
  OwnedTensor qkv = device_filled(c.qkv_shape(), DType::F32, 0.5f);
  OwnedTensor out = device_filled(c.out_shape(), DType::F32, 0.0f);
  OwnedTensor lse = device_filled(c.lse_shape(), DType::F32, 0.0f);
  OwnedTensor dqkv = device_filled(c.qkv_shape(), DType::F32, 0.0f);
  try {
    ops::attention_forward(out, lse, qkv, 2, 1, c.scale());
    FAIL() << "forward accepted D = 160";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("head dim 160"), std::string::npos) << e.what();
  }
  try {
    ops::attention_backward(dqkv, out, qkv, out, lse, 2, 1, c.scale());
    FAIL() << "backward accepted D = 160";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("head dim 160"), std::string::npos) << e.what();
  }
}

TEST(CudaAttention, MixedActivationDtypesAreRejected) {
  ZT_REQUIRE_GPU();
  const Case c{1, 8, 2, 1, 16};
  OwnedTensor qkv = device_filled(c.qkv_shape(), DType::BF16, 0.5f);
  OwnedTensor out = device_filled(c.out_shape(), DType::F32, 0.0f);
  OwnedTensor lse = device_filled(c.lse_shape(), DType::F32, 0.0f);
  EXPECT_THROW(ops::attention_forward(out, lse, qkv, 2, 1, c.scale()), Error);
  OwnedTensor lse_bf16 = device_filled(c.lse_shape(), DType::BF16, 0.0f);
  OwnedTensor out_bf16 = device_filled(c.out_shape(), DType::BF16, 0.0f);
  EXPECT_THROW(ops::attention_forward(out_bf16, lse_bf16, qkv, 2, 1, c.scale()), Error);  // lse must be f32
}

// Needs no GPU: bf16 activations are a CUDA-only feature; the CPU op still takes f32 only.
TEST(CudaAttention, Bf16OnCpuIsRejected) {
  const Case c{1, 4, 2, 1, 8};
  OwnedTensor qkv(c.qkv_shape(), DType::BF16);
  OwnedTensor out(c.out_shape(), DType::BF16);
  OwnedTensor lse(c.lse_shape(), DType::F32);
  qkv->fill_f32(0.5f);
  EXPECT_THROW(ops::attention_forward(out, lse, qkv, 2, 1, c.scale()), Error);
}

}  // namespace
}  // namespace zt
