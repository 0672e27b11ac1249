// CUDA RoPE against the CPU backend: forward and backward in place on packed qkv for f32
// and bf16, head_dim 128 and 64 with Llama-3 scaling, D = 8 (plain and Llama-3) and D = 6
// (odd half: scalar path), GQA head counts, long positions; v heads untouched; the device
// table holds the host table's bits; the offset op (KV-cache decode) agrees bit for bit with
// the full-sequence op and with the CPU; unaligned views.
//
// Tolerances, as max|gpu - cpu| / max|cpu|: f32 1e-6 (the same products and sums on both
// sides, rounded one by one on the GPU; a CPU compiler that fuses them into FMAs differs
// by an ulp); bf16 1e-2 (one rounding of the result; the CPU gets the same rounded input).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/rope.h"
#include "ops/rope_offset.h"

namespace {

using zt::Device;
using zt::DType;
using zt::OwnedTensor;
using zt::Shape;
using zt::Tensor;
using zt::ops::RopeConfig;
using zt::ops::RopeScaling;
using zt::testing::make;
using zt::testing::randn;
using zt::testing::to_device;
using zt::testing::to_host;

constexpr double kF32Tol = 1e-6;
constexpr double kLowPrecisionTol = 1e-2;

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

RopeConfig llama3_config(int head_dim, int original_max_positions) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.theta = 500000.0f;
  c.scaling.type = RopeScaling::Type::Llama3;
  c.scaling.factor = 8.0f;
  c.scaling.low_freq_factor = 1.0f;
  c.scaling.high_freq_factor = 4.0f;
  c.scaling.original_max_position_embeddings = original_max_positions;
  return c;
}
RopeConfig plain_config(int head_dim) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.theta = 10000.0f;
  return c;
}

struct RopeCase {
  const char* name;
  RopeConfig config;
  int64_t B, T;
  int Hq, Hkv;
  DType act;
};
std::string case_name(const ::testing::TestParamInfo<RopeCase>& info) {
  return std::string(info.param.name) + "_" + zt::dtype_name(info.param.act);
}

const RopeCase kCases[] = {
    {"llama3_D128_Hq32_Hkv8", llama3_config(128, 8192), 1, 64, 32, 8, DType::F32},
    {"llama3_D128_Hq32_Hkv8", llama3_config(128, 8192), 1, 64, 32, 8, DType::BF16},
    {"llama3_D128_long", llama3_config(128, 8192), 1, 2048, 1, 1, DType::F32},
    {"llama3_D64_Hq4_Hkv2", llama3_config(64, 8192), 2, 33, 4, 2, DType::F32},
    {"llama3_D64_Hq4_Hkv2", llama3_config(64, 8192), 2, 33, 4, 2, DType::BF16},
    {"llama3_D64_Hq4_Hkv2", llama3_config(64, 8192), 2, 33, 4, 2, DType::F16},
    {"llama3_D128_Hq32_Hkv8", llama3_config(128, 8192), 1, 64, 32, 8, DType::F16},
    {"llama3_D8_small_context", llama3_config(8, 16), 3, 40, 4, 1, DType::F32},
    {"plain_D8_Hq3_Hkv3", plain_config(8), 3, 5, 3, 3, DType::F32},
    {"plain_D8_Hq4_Hkv2", plain_config(8), 2, 7, 4, 2, DType::BF16},
    {"plain_D8_Hq4_Hkv2", plain_config(8), 2, 7, 4, 2, DType::F16},
    {"plain_D6_odd_half", plain_config(6), 2, 9, 2, 1, DType::F32},
    {"plain_D64_one_token", plain_config(64), 1, 1, 2, 1, DType::F32},
};

// qkv values rounded to `dtype`: the host f32 copy for the CPU op and the device tensor.
struct Qkv {
  OwnedTensor cpu;
  OwnedTensor gpu;
  Shape shape;
};
Qkv make_qkv(const RopeCase& k, uint32_t seed) {
  const Shape shape{k.B, k.T, static_cast<int64_t>(k.Hq + 2 * k.Hkv) * k.config.head_dim};
  const OwnedTensor rounded = make(randn(static_cast<size_t>(zt::shape_numel(shape)), seed), shape, k.act);
  return {make(rounded->to_f32_vector(), shape), to_device(rounded), shape};
}

// The v heads (after the Hq + Hkv rotated heads of each row) are the input's, bit for bit.
void expect_v_untouched(const Tensor& gpu_after, const Tensor& gpu_before_host, const RopeCase& k) {
  const OwnedTensor after = to_host(gpu_after);
  const size_t es = zt::dtype_size(k.act);
  const int64_t row = gpu_before_host.size(2), rot = static_cast<int64_t>(k.Hq + k.Hkv) * k.config.head_dim;
  const auto* a = static_cast<const uint8_t*>(after->data());
  const auto* b = static_cast<const uint8_t*>(gpu_before_host.data());
  for (int64_t r = 0; r < k.B * k.T; ++r) {
    const size_t off = static_cast<size_t>(r * row + rot) * es, n = static_cast<size_t>(row - rot) * es;
    ASSERT_EQ(std::memcmp(a + off, b + off, n), 0) << "v heads of row " << r << " changed";
  }
}

class CudaRope : public ::testing::TestWithParam<RopeCase> {};

TEST_P(CudaRope, ForwardMatchesCpu) {
  ZT_REQUIRE_GPU();
  const RopeCase k = GetParam();
  const int P = static_cast<int>(k.T) + 3;
  const zt::ops::RopeTable host_table = zt::ops::make_rope_table(k.config, P);
  const zt::ops::RopeTable dev_table = zt::ops::make_rope_table(k.config, P, Device::cuda());
  const Qkv q = make_qkv(k, 1);
  const OwnedTensor before = to_host(q.gpu);
  zt::ops::rope_forward_inplace(q.cpu, k.Hq, k.Hkv, host_table);
  zt::ops::rope_forward_inplace(q.gpu, k.Hq, k.Hkv, dev_table);
  expect_close(q.gpu, q.cpu, k.act == DType::F32 ? kF32Tol : kLowPrecisionTol, "rotated qkv");
  expect_v_untouched(q.gpu, before, k);
}

TEST_P(CudaRope, BackwardMatchesCpu) {
  ZT_REQUIRE_GPU();
  const RopeCase k = GetParam();
  const int P = static_cast<int>(k.T) + 1;
  const zt::ops::RopeTable host_table = zt::ops::make_rope_table(k.config, P);
  const zt::ops::RopeTable dev_table = zt::ops::make_rope_table(k.config, P, Device::cuda());
  const Qkv g = make_qkv(k, 2);
  const OwnedTensor before = to_host(g.gpu);
  zt::ops::rope_backward_inplace(g.cpu, k.Hq, k.Hkv, host_table);
  zt::ops::rope_backward_inplace(g.gpu, k.Hq, k.Hkv, dev_table);
  expect_close(g.gpu, g.cpu, k.act == DType::F32 ? kF32Tol : kLowPrecisionTol, "dqkv");
  expect_v_untouched(g.gpu, before, k);
}

// The backward is the inverse rotation: forward then backward gives the input back.
TEST_P(CudaRope, BackwardUndoesForward) {
  ZT_REQUIRE_GPU();
  const RopeCase k = GetParam();
  if (k.act != DType::F32) GTEST_SKIP() << "bf16 rounds twice; the f32 case checks the inverse";
  const zt::ops::RopeTable dev_table = zt::ops::make_rope_table(k.config, static_cast<int>(k.T), Device::cuda());
  const Qkv q = make_qkv(k, 3);
  zt::ops::rope_forward_inplace(q.gpu, k.Hq, k.Hkv, dev_table);
  zt::ops::rope_backward_inplace(q.gpu, k.Hq, k.Hkv, dev_table);
  const std::vector<float> got = to_host(q.gpu)->to_f32_vector(), want = q.cpu->to_f32_vector();
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  EXPECT_LT(err, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRope, ::testing::ValuesIn(kCases), case_name);

// make_rope_table on CUDA: the host table's values, bit for bit.
TEST(CudaRopeTable, DeviceTableHoldsTheHostBits) {
  ZT_REQUIRE_GPU();
  for (const RopeConfig& c : {llama3_config(128, 8192), llama3_config(64, 8192), plain_config(8)}) {
    const zt::ops::RopeTable h = zt::ops::make_rope_table(c, 300);
    const zt::ops::RopeTable d = zt::ops::make_rope_table(c, 300, Device::cuda());
    EXPECT_EQ(d.max_positions, h.max_positions);
    EXPECT_EQ(d.head_dim, h.head_dim);
    ASSERT_TRUE(d.cos->device().is_cuda());
    ASSERT_TRUE(d.sin->device().is_cuda());
    EXPECT_EQ(to_host(d.cos)->to_f32_vector(), h.cos->to_f32_vector()) << "cos, D = " << c.head_dim;
    EXPECT_EQ(to_host(d.sin)->to_f32_vector(), h.sin->to_f32_vector()) << "sin, D = " << c.head_dim;
  }
}

// rope_forward_inplace_at (decode with a KV cache): rows at positions start.. of a short
// qkv equal, bit for bit, the same rows of a full-sequence rotation; and match the CPU op.
TEST(CudaRopeOffset, MatchesFullSequenceAndCpu) {
  ZT_REQUIRE_GPU();
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    const RopeConfig c = llama3_config(64, 8192);
    const int Hq = 4, Hkv = 2;
    const int64_t T = 24, start = 17, Tn = T - start, row = static_cast<int64_t>(Hq + 2 * Hkv) * c.head_dim;
    const zt::ops::RopeTable dev_table = zt::ops::make_rope_table(c, static_cast<int>(T), Device::cuda());
    const zt::ops::RopeTable host_table = zt::ops::make_rope_table(c, static_cast<int>(T));
    const OwnedTensor full_h = make(randn(static_cast<size_t>(T * row), 4), {1, T, row}, act);
    // The last Tn rows as their own [1, Tn, row] tensor.
    const std::vector<float> all = full_h->to_f32_vector();
    const std::vector<float> tail(all.begin() + start * row, all.end());
    const OwnedTensor tail_h = make(tail, {1, Tn, row}, act);

    const OwnedTensor full_d = to_device(full_h), tail_d = to_device(tail_h);
    zt::ops::rope_forward_inplace(full_d, Hq, Hkv, dev_table);
    zt::ops::rope_forward_inplace_at(tail_d, Hq, Hkv, dev_table, start);
    const OwnedTensor full_out = to_host(full_d), tail_out = to_host(tail_d);
    const size_t es = zt::dtype_size(act);
    EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(full_out->data()) + static_cast<size_t>(start * row) * es,
                          tail_out->data(), static_cast<size_t>(Tn * row) * es),
              0)
        << "offset rotation differs from the full sequence's (" << zt::dtype_name(act) << ")";

    const OwnedTensor tail_c = make(tail_h->to_f32_vector(), {1, Tn, row});
    zt::ops::rope_forward_inplace_at(tail_c, Hq, Hkv, host_table, start);
    expect_close(tail_d, tail_c, act == DType::F32 ? kF32Tol : kLowPrecisionTol, "offset rotation vs CPU");
  }
}

// qkv off 16-byte alignment (f32 with D/2 a multiple of 4): the scalar path, same results.
TEST(CudaRopeAlignment, UnalignedViewMatchesCpu) {
  ZT_REQUIRE_GPU();
  const RopeConfig c = llama3_config(64, 8192);
  const int Hq = 2, Hkv = 1;
  const int64_t B = 2, T = 10, row = static_cast<int64_t>(Hq + 2 * Hkv) * c.head_dim;
  const Shape shape{B, T, row};
  const std::vector<float> x = randn(static_cast<size_t>(B * T * row), 5);
  std::vector<float> padded(x.size() + 1, 0.0f);
  std::copy(x.begin(), x.end(), padded.begin() + 1);
  const OwnedTensor buf = to_device(make(padded, {static_cast<int64_t>(padded.size())}));
  const Tensor view(static_cast<float*>(buf->data()) + 1, shape, DType::F32, Device::cuda());
  const OwnedTensor cpu = make(x, shape);
  zt::ops::rope_forward_inplace(cpu, Hq, Hkv, zt::ops::make_rope_table(c, static_cast<int>(T)));
  zt::ops::rope_forward_inplace(view, Hq, Hkv, zt::ops::make_rope_table(c, static_cast<int>(T), Device::cuda()));
  expect_close(view, cpu, kF32Tol, "unaligned forward");
}

// The CPU still takes only f32 qkv; bf16 is a CUDA-only relaxation.
TEST(CudaRopeDtypes, Bf16OnlyOnCuda) {
  const zt::ops::RopeTable table = zt::ops::make_rope_table(plain_config(8), 4);
  OwnedTensor qkv({1, 4, 3 * 8}, DType::BF16);
  EXPECT_THROW(zt::ops::rope_forward_inplace(qkv, 1, 1, table), zt::Error);
}

}  // namespace
