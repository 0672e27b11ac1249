// Tensor-core attention forward (backend/cuda/attention_tc.cu, opt-in with ZT_ATTENTION_TC=1)
// against the existing CUDA kernel (ops::attention_forward, f32 FMA) on the same bf16 inputs:
// out within 2e-2 (max |a - b| / max |b|: both are bf16, and the tensor-core path also rounds
// P to bf16 before P V), lse within 1e-3 absolute (both f32 softmax statistics of the same
// bf16 inputs, different summation orders). The backward run on the tensor-core forward's
// out/lse must match the backward on the reference forward's out/lse within 2e-2.
// B in {1, 2}, T in {1, 17, 64, 65, 1024} (partial, exact and many query tiles), D in
// {64, 128}, MHA (Hq = Hkv = 4) and GQA (Hq = 8, Hkv = 2).
//
// Run these without ZT_ATTENTION_TC=1 in the environment: with it, ops::attention_forward
// itself takes the tensor-core kernel and the comparison would be vacuous (the tests skip).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "core/tensor.h"

#if defined(ZT_WITH_CUDA)
#include "backend/cuda/attention_tc.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "ops/attention.h"
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

class CudaAttentionTensorCore : public ::testing::TestWithParam<TcCase> {};

TEST_P(CudaAttentionTensorCore, MatchesReferenceKernel) {
  ZT_REQUIRE_GPU();
  if (cuda::attention_tensor_core_enabled())
    GTEST_SKIP() << "ZT_ATTENTION_TC=1: the reference would be the tensor-core kernel too";
  const TcCase c = GetParam();
  const int hq = static_cast<int>(c.Hq), hkv = static_cast<int>(c.Hkv);
  const DType dt = DType::BF16;
  const uint32_t seed = static_cast<uint32_t>(c.B * 1000003 + c.T * 1009 + c.Hq * 101 + c.Hkv * 11 + c.D);
  OwnedTensor qkv = to_device(make(randn(static_cast<size_t>(shape_numel(c.qkv_shape())), seed), c.qkv_shape(), dt));
  OwnedTensor dout =
      to_device(make(randn(static_cast<size_t>(shape_numel(c.out_shape())), seed + 7919), c.out_shape(), dt));

  OwnedTensor out_ref = device_filled(c.out_shape(), dt, kNaN);
  OwnedTensor lse_ref = device_filled(c.lse_shape(), DType::F32, kNaN);
  OwnedTensor out_tc = device_filled(c.out_shape(), dt, kNaN);
  OwnedTensor lse_tc = device_filled(c.lse_shape(), DType::F32, kNaN);
  ASSERT_TRUE(cuda::attention_forward_tensor_core_supports(out_tc, qkv, hq, hkv));
  ops::attention_forward(out_ref, lse_ref, qkv, hq, hkv, c.scale());
  cuda::attention_forward_tensor_core(out_tc, lse_tc, qkv, hq, hkv, c.scale());

  OwnedTensor dqkv_ref = device_filled(c.qkv_shape(), dt, kNaN);
  OwnedTensor dqkv_tc = device_filled(c.qkv_shape(), dt, kNaN);
  ops::attention_backward(dqkv_ref, dout, qkv, out_ref, lse_ref, hq, hkv, c.scale());
  ops::attention_backward(dqkv_tc, dout, qkv, out_tc, lse_tc, hq, hkv, c.scale());

  const double e_out = scaled_error(to_host(out_tc), to_host(out_ref));
  const double e_lse = abs_error(to_host(lse_tc), to_host(lse_ref));
  const double e_dqkv = scaled_error(to_host(dqkv_tc), to_host(dqkv_ref));
  std::printf("tensor-core attention %s: out %.2e lse %.2e dqkv %.2e\n", c.str().c_str(), e_out, e_lse, e_dqkv);
  EXPECT_LE(e_out, 2e-2) << "out";
  EXPECT_LE(e_lse, 1e-3) << "lse";
  EXPECT_LE(e_dqkv, 2e-2) << "dqkv";
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

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTensorCore, ::testing::ValuesIn(tc_cases()),
                         [](const ::testing::TestParamInfo<TcCase>& info) { return info.param.str(); });

// Only bf16 with head dim 64 or 128 takes the tensor-core path.
TEST(CudaAttentionTensorCoreDispatch, SupportsOnlyBf16HeadDim64And128) {
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
