// Tensor-core attention (backend/cuda/attention_tc.cu) against the f32-FMA CUDA kernels
// (cuda::attention_forward_fma / attention_backward_fma) on the same bf16 or f16 inputs
// (bounds below for bf16; f16 rounds 8x finer and gets half of each):
//   forward:  out within 2e-2 (max |a - b| / max |b|: both are bf16, and the tensor-core
//             path also rounds P to bf16 before P V), lse within 1e-3 absolute (f32 softmax
//             statistics of the same inputs, different summation orders);
//   backward: on the same out/lse (the reference forward's), dq, dk and dv each within 2e-2
//             (the tensor-core path rounds P and dS to bf16 as mma operands);
//   both:     the tensor-core backward on the tensor-core forward's out/lse within 2e-2.
// B in {1, 2}, T in {1, 17, 64, 65, 1024} (partial, exact and many tiles), D in {64, 128},
// MHA (Hq = Hkv = 4) and GQA (Hq = 8, Hkv = 2). Every output starts as NaN, so an element
// a kernel forgets to write fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/cuda_tensor.h"
#include "core/tensor.h"

#if defined(ZT_WITH_CUDA)
#include "backend/attention_kernels.h"
#include "backend/cuda/attention_tc.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#endif

namespace zt {
namespace {

#if defined(ZT_WITH_CUDA)

using testing::make;
using testing::randn;
using testing::to_device;
using testing::to_host;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct TcCase {
  int64_t B, T, Hq, Hkv, D;
  Shape qkv_shape() const { return {B, T, (Hq + 2 * Hkv) * D}; }
  Shape out_shape() const { return {B, T, Hq * D}; }
  Shape lse_shape() const { return {B, Hq, T}; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
  std::string str() const {
    return "B" + std::to_string(B) + "_T" + std::to_string(T) + "_Hq" + std::to_string(Hq) + "_Hkv" +
           std::to_string(Hkv) + "_D" + std::to_string(D);
  }
};

// max |a - b| / max |b| (infinite when a has a NaN or infinity).
double scaled_error(const Tensor& got, const Tensor& ref) {
  const std::vector<float> a = got.to_f32_vector(), b = ref.to_f32_vector();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

// max |a - b| (infinite when a has a NaN or infinity).
double abs_error(const Tensor& got, const Tensor& ref) {
  const std::vector<float> a = got.to_f32_vector(), b = ref.to_f32_vector();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

OwnedTensor device_filled(const Shape& shape, DType dt, float value) {
  OwnedTensor h(shape, dt);
  h->fill_f32(value);
  return to_device(h);
}

class CudaAttentionTensorCore : public ::testing::TestWithParam<std::tuple<TcCase, DType>> {};

// max |a - b| / scale over the q, k or v slots (part 0, 1, 2) of a [B, T, (Hq + 2 Hkv) D]
// gradient, scale = max(max |b| over the slot, 0.1 max |b| over the whole gradient). The
// floor matters where a slot's exact gradient is zero: at T = 1 every query sees one key,
// P = 1 and O = V, so dS = P (dO.V - dO.O) = 0 and dq, dk are rounding noise (~1e-7) of
// both kernels, which max |b| of the slot alone would turn into a relative error of ~1.
double slot_error(const Tensor& got, const Tensor& ref, const TcCase& c, int part) {
  const std::vector<float> a = got.to_f32_vector(), b = ref.to_f32_vector();
  const int64_t row = (c.Hq + 2 * c.Hkv) * c.D;
  const int64_t begin = part == 0 ? 0 : (part == 1 ? c.Hq * c.D : (c.Hq + c.Hkv) * c.D);
  const int64_t width = part == 0 ? c.Hq * c.D : c.Hkv * c.D;
  double worst = 0, scale = 0, whole = 0;
  for (float v : b) whole = std::max(whole, std::fabs(static_cast<double>(v)));
  for (int64_t r = 0; r < c.B * c.T; ++r)
    for (int64_t i = r * row + begin; i < r * row + begin + width; ++i) {
      if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    }
  return worst / std::max({scale, 0.1 * whole, 1e-30});
}

TEST_P(CudaAttentionTensorCore, MatchesReferenceKernel) {
  ZT_REQUIRE_GPU();
  const TcCase c = std::get<0>(GetParam());
  const DType dt = std::get<1>(GetParam());
  const double tol = dt == DType::F16 ? 1e-2 : 2e-2;
  const int hq = static_cast<int>(c.Hq), hkv = static_cast<int>(c.Hkv);
  const uint32_t seed = static_cast<uint32_t>(c.B * 1000003 + c.T * 1009 + c.Hq * 101 + c.Hkv * 11 + c.D);
  OwnedTensor qkv = to_device(make(randn(static_cast<size_t>(shape_numel(c.qkv_shape())), seed), c.qkv_shape(), dt));
  OwnedTensor dout =
      to_device(make(randn(static_cast<size_t>(shape_numel(c.out_shape())), seed + 7919), c.out_shape(), dt));

  OwnedTensor out_ref = device_filled(c.out_shape(), dt, kNaN);
  OwnedTensor lse_ref = device_filled(c.lse_shape(), DType::F32, kNaN);
  OwnedTensor out_tc = device_filled(c.out_shape(), dt, kNaN);
  OwnedTensor lse_tc = device_filled(c.lse_shape(), DType::F32, kNaN);
  ASSERT_TRUE(cuda::attention_forward_tensor_core_supports(out_tc, qkv, hq, hkv));
  cuda::attention_forward_fma(out_ref, lse_ref, qkv, hq, hkv, c.scale(), Tensor());
  cuda::attention_forward_tensor_core(out_tc, lse_tc, qkv, hq, hkv, c.scale());

  OwnedTensor dqkv_ref = device_filled(c.qkv_shape(), dt, kNaN);
  OwnedTensor dqkv_tc = device_filled(c.qkv_shape(), dt, kNaN);
  OwnedTensor dqkv_both = device_filled(c.qkv_shape(), dt, kNaN);
  ASSERT_TRUE(cuda::attention_backward_tensor_core_supports(dqkv_tc, dout, qkv, out_ref, hq, hkv));
  cuda::attention_backward_fma(dqkv_ref, dout, qkv, out_ref, lse_ref, hq, hkv, c.scale(), Tensor());
  cuda::attention_backward_tensor_core(dqkv_tc, dout, qkv, out_ref, lse_ref, hq, hkv, c.scale());
  cuda::attention_backward_tensor_core(dqkv_both, dout, qkv, out_tc, lse_tc, hq, hkv, c.scale());

  const double e_out = scaled_error(to_host(out_tc), to_host(out_ref));
  const double e_lse = abs_error(to_host(lse_tc), to_host(lse_ref));
  const OwnedTensor got = to_host(dqkv_tc), ref = to_host(dqkv_ref);
  const double e_dq = slot_error(got, ref, c, 0), e_dk = slot_error(got, ref, c, 1), e_dv = slot_error(got, ref, c, 2);
  const double e_both = scaled_error(to_host(dqkv_both), ref);
  std::printf("tensor-core attention %s %s: out %.2e lse %.2e | dq %.2e dk %.2e dv %.2e | fwd+bwd %.2e\n",
              dtype_name(dt), c.str().c_str(), e_out, e_lse, e_dq, e_dk, e_dv, e_both);
  EXPECT_LE(e_out, tol) << "out";
  EXPECT_LE(e_lse, 1e-3) << "lse";
  EXPECT_LE(e_dq, tol) << "dq";
  EXPECT_LE(e_dk, tol) << "dk";
  EXPECT_LE(e_dv, tol) << "dv";
  EXPECT_LE(e_both, tol) << "forward + backward";
}

// Same inputs, same bits: the backward has one writer per element (no atomics).
TEST(CudaAttentionTensorCoreBackward, IsDeterministic) {
  ZT_REQUIRE_GPU();
  const TcCase c{2, 300, 8, 2, 64};
  for (const DType dt : {DType::BF16, DType::F16}) {
    OwnedTensor qkv = to_device(make(randn(static_cast<size_t>(shape_numel(c.qkv_shape())), 11), c.qkv_shape(), dt));
    OwnedTensor dout = to_device(make(randn(static_cast<size_t>(shape_numel(c.out_shape())), 12), c.out_shape(), dt));
    OwnedTensor out = device_filled(c.out_shape(), dt, kNaN);
    OwnedTensor lse = device_filled(c.lse_shape(), DType::F32, kNaN);
    cuda::attention_forward_tensor_core(out, lse, qkv, 8, 2, c.scale());
    OwnedTensor d1 = device_filled(c.qkv_shape(), dt, kNaN), d2 = device_filled(c.qkv_shape(), dt, kNaN);
    cuda::attention_backward_tensor_core(d1, dout, qkv, out, lse, 8, 2, c.scale());
    cuda::attention_backward_tensor_core(d2, dout, qkv, out, lse, 8, 2, c.scale());
    const std::vector<float> a = to_host(d1)->to_f32_vector(), b = to_host(d2)->to_f32_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << dtype_name(dt) << " element " << i;
  }
}

std::vector<TcCase> tc_cases() {
  std::vector<TcCase> cases;
  for (int64_t D : {64, 128})
    for (int64_t T : {1, 17, 64, 65, 1024})
      for (int64_t B : {1, 2}) {
        cases.push_back({B, T, 4, 4, D});  // MHA
        cases.push_back({B, T, 8, 2, D});  // GQA
      }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTensorCore,
                         ::testing::Combine(::testing::ValuesIn(tc_cases()),
                                            ::testing::Values(DType::BF16, DType::F16)),
                         [](const ::testing::TestParamInfo<CudaAttentionTensorCore::ParamType>& info) {
                           return std::get<0>(info.param).str() + "_" + dtype_name(std::get<1>(info.param));
                         });

// Only bf16 and f16 with head dim 64 or 128 take the tensor-core path.
TEST(CudaAttentionTensorCoreDispatch, Supports16BitHeadDim64And128) {
  ZT_REQUIRE_GPU();
  const auto supports = [](DType dt, int64_t D) {
    const TcCase c{1, 8, 4, 2, D};
    OwnedTensor qkv = device_filled(c.qkv_shape(), dt, 0.0f);
    OwnedTensor out = device_filled(c.out_shape(), dt, 0.0f);
    return cuda::attention_forward_tensor_core_supports(out, qkv, 4, 2);
  };
  EXPECT_TRUE(supports(DType::BF16, 64));
  EXPECT_TRUE(supports(DType::BF16, 128));
  EXPECT_FALSE(supports(DType::BF16, 32));
  EXPECT_FALSE(supports(DType::BF16, 96));
  EXPECT_TRUE(supports(DType::F16, 64));
  EXPECT_TRUE(supports(DType::F16, 128));
  EXPECT_FALSE(supports(DType::F16, 96));
  EXPECT_FALSE(supports(DType::F32, 64));
}

#else  // CPU-only build: attention_tc.cu is not compiled.

TEST(CudaAttentionTensorCore, NeedsCudaBuild) {
  ZT_REQUIRE_GPU();
  GTEST_SKIP() << "built without the CUDA backend";
}

#endif

}  // namespace
}  // namespace zt
