// CUDA KV-cache attention (ops::kv_cache_write, ops::decode_attention_forward) against the
// CPU backend: caches already holding `start` positions, then Tn new tokens written and
// attended; decode steps (Tn = 1) at short and long offsets, a prefill (start 0, Tn > 1),
// GQA groups of 1, 2 and 4, head dims 8, 64, 80 (lanes left idle) and 128, batch > 1.
// The written cache rows are bit-exact copies; the attention output within 1e-5 of the
// output's range (the GPU's online softmax rescales partial sums the CPU takes in one
// pass). A head dim above 128 is Unsupported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/decode_attention.h"

namespace {

using zt::Device;
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::Tensor;
using zt::testing::to_device;
using zt::testing::to_host;

struct Case {
  const char* name;
  int64_t B, Tn, start;
  int Hq, Hkv;
  int64_t D, S;
};

OwnedTensor random_tensor(Shape shape, uint32_t seed) {
  const size_t n = static_cast<size_t>(zt::shape_numel(shape));
  return zt::testing::make(zt::testing::randn(n, seed), std::move(shape));
}

class CudaDecodeAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CudaDecodeAttention, MatchesCpu) {
  ZT_REQUIRE_GPU();
  const Case c = GetParam();
  const int64_t width = (c.Hq + 2 * c.Hkv) * c.D;
  OwnedTensor qkv = random_tensor({c.B, c.Tn, width}, 1);
  OwnedTensor k_cpu = random_tensor({c.B, c.Hkv, c.S, c.D}, 2), v_cpu = random_tensor({c.B, c.Hkv, c.S, c.D}, 3);
  OwnedTensor k_gpu = to_device(k_cpu), v_gpu = to_device(v_cpu), qkv_gpu = to_device(qkv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));

  zt::ops::kv_cache_write(k_cpu, v_cpu, qkv, c.Hq, c.Hkv, c.start);
  zt::ops::kv_cache_write(k_gpu, v_gpu, qkv_gpu, c.Hq, c.Hkv, c.start);
  EXPECT_EQ(to_host(k_gpu)->to_f32_vector(), k_cpu->to_f32_vector()) << "k cache";
  EXPECT_EQ(to_host(v_gpu)->to_f32_vector(), v_cpu->to_f32_vector()) << "v cache";

  OwnedTensor out_cpu({c.B, c.Tn, c.Hq * c.D}, DType::F32);
  OwnedTensor out_gpu({c.B, c.Tn, c.Hq * c.D}, DType::F32, Device::cuda());
  zt::ops::decode_attention_forward(out_cpu, qkv, k_cpu, v_cpu, c.Hq, c.Hkv, c.start, scale);
  zt::ops::decode_attention_forward(out_gpu, qkv_gpu, k_gpu, v_gpu, c.Hq, c.Hkv, c.start, scale);
  const std::vector<float> got = to_host(out_gpu)->to_f32_vector(), want = out_cpu->to_f32_vector();
  double worst = 0, range = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "GPU value " << got[i] << " at " << i;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    range = std::max(range, std::fabs(static_cast<double>(want[i])));
  }
  EXPECT_LE(worst, 1e-5 * range) << "max|gpu - cpu| " << worst << ", max|cpu| " << range;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaDecodeAttention,
                         ::testing::Values(Case{"decode_B2_Hq8_Hkv2_D64_at37", 2, 1, 37, 8, 2, 64, 64},
                                           Case{"decode_B1_Hq32_Hkv8_D64_at3000", 1, 1, 3000, 32, 8, 64, 3072},
                                           Case{"decode_first_token_D8", 1, 1, 0, 2, 1, 8, 4},
                                           Case{"prefill_B1_Tn17_Hq4_Hkv4_D128", 1, 17, 0, 4, 4, 128, 32},
                                           Case{"chunk_B3_Tn5_at250_Hq6_Hkv3_D80", 3, 5, 250, 6, 3, 80, 256},
                                           Case{"prefill_B2_Tn300_Hq4_Hkv1_D64", 2, 300, 0, 4, 1, 64, 300}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(CudaDecodeAttentionLimits, HeadDimAbove128IsUnsupported) {
  ZT_REQUIRE_GPU();
  const int64_t D = 192;
  OwnedTensor qkv({1, 1, 3 * D}, DType::F32, Device::cuda());
  OwnedTensor k({1, 1, 4, D}, DType::F32, Device::cuda()), v({1, 1, 4, D}, DType::F32, Device::cuda());
  OwnedTensor out({1, 1, D}, DType::F32, Device::cuda());
  try {
    zt::ops::decode_attention_forward(out, qkv, k, v, 1, 1, 0, 1.0f);
    ADD_FAILURE() << "head dim 192 was accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported) << e.what();
  }
}

}  // namespace
