// CUDA attention over packed samples (ops/attention.h's segment_starts) against the CPU op
// on the same samples (itself checked against each sample run alone, tests/grad): out, lse
// and dqkv through the dispatching op (tensor cores for bf16/f16 at head dim 64 and 128, the
// f32-FMA kernels otherwise) and through the FMA kernels directly for 16-bit inputs. Rows mix
// 1-token samples, samples inside one tile, samples across tile boundaries and long ones, so
// that the kernels' key-tile skipping (forward, dQ), query-tile end (dK/dV) and per-row masks
// are all exercised; every output element must be written (NaN-filled beforehand).
//
// Tolerances as tests/cuda/attention_test.cpp: f32 1e-5; bf16 2e-2, f16 1e-2 (outputs
// stored in 16 bit); lse 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "backend/attention_kernels.h"
#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace zt {
namespace {

using testing::make;
using testing::randn;
using testing::to_device;
using testing::to_host;

struct PackedCase {
  std::string name;
  int64_t T, Hq, Hkv, D;
  std::vector<std::vector<int64_t>> lengths;  // per row, summing to T
  int64_t B() const { return static_cast<int64_t>(lengths.size()); }
  int64_t row() const { return (Hq + 2 * Hkv) * D; }
  Shape qkv_shape() const { return {B(), T, row()}; }
  Shape out_shape() const { return {B(), T, Hq * D}; }
  Shape lse_shape() const { return {B(), Hq, T}; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
};

OwnedTensor starts_of(const PackedCase& c) {
  OwnedTensor s({c.B(), c.T}, DType::I32);
  for (int64_t b = 0; b < c.B(); ++b) {
    int64_t at = 0;
    for (int64_t n : c.lengths[static_cast<size_t>(b)]) {
      for (int64_t i = 0; i < n; ++i) s.data<int32_t>()[b * c.T + at + i] = static_cast<int32_t>(at);
      at += n;
    }
    EXPECT_EQ(at, c.T) << c.name << ": row " << b;
  }
  return s;
}

double scaled_error(const Tensor& got, const Tensor& ref) {
  const std::vector<float> a = got.to_f32_vector(), b = ref.to_f32_vector();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

OwnedTensor device_nan(const Shape& shape, DType dt) {
  OwnedTensor h(shape, dt);
  h->fill_f32(std::numeric_limits<float>::quiet_NaN());
  return to_device(h);
}

enum class Path { Dispatch, Fma };

void compare(const PackedCase& c, DType dt, Path path) {
  const int hq = static_cast<int>(c.Hq), hkv = static_cast<int>(c.Hkv);
  std::vector<float> qkv_v = randn(static_cast<size_t>(shape_numel(c.qkv_shape())), 31);
  std::vector<float> dout_v = randn(static_cast<size_t>(shape_numel(c.out_shape())), 37);
  for (std::vector<float>* v : {&qkv_v, &dout_v})  // inputs the GPU's dtype can hold exactly
    for (float& x : *v) x = dt == DType::BF16 ? to_f32(to_bf16(x)) : dt == DType::F16 ? to_f32(to_f16(x)) : x;
  const OwnedTensor starts = starts_of(c);

  OwnedTensor qkv = to_device(make(qkv_v, c.qkv_shape(), dt)), dout = to_device(make(dout_v, c.out_shape(), dt));
  OwnedTensor seg = to_device(starts);
  OwnedTensor out = device_nan(c.out_shape(), dt), lse = device_nan(c.lse_shape(), DType::F32);
  OwnedTensor dqkv = device_nan(c.qkv_shape(), dt);
  if (path == Path::Fma) {
    cuda::attention_forward_fma(out, lse, qkv, hq, hkv, c.scale(), seg);
    cuda::attention_backward_fma(dqkv, dout, qkv, out, lse, hq, hkv, c.scale(), seg);
  } else {
    ops::attention_forward(out, lse, qkv, hq, hkv, c.scale(), seg);
    ops::attention_backward(dqkv, dout, qkv, out, lse, hq, hkv, c.scale(), seg);
  }
  const OwnedTensor g_out = to_host(out), g_lse = to_host(lse), g_dqkv = to_host(dqkv);

  OwnedTensor q_c = make(qkv_v, c.qkv_shape()), d_c = make(dout_v, c.out_shape());
  OwnedTensor o_c(c.out_shape(), DType::F32), l_c(c.lse_shape(), DType::F32), dq_c(c.qkv_shape(), DType::F32);
  ops::attention_forward(o_c, l_c, q_c, hq, hkv, c.scale(), starts);
  OwnedTensor g_out_f32(c.out_shape(), DType::F32);
  g_out_f32->copy_from(g_out);
  ops::attention_backward(dq_c, d_c, q_c, g_out_f32, g_lse, hq, hkv, c.scale(), starts);  // the GPU's out, lse

  const double tol = dt == DType::F32 ? 1e-5 : dt == DType::F16 ? 1e-2 : 2e-2;
  const double e_out = scaled_error(g_out, o_c), e_lse = scaled_error(g_lse, l_c), e_dq = scaled_error(g_dqkv, dq_c);
  std::printf("cuda packed attention %s %s %s: out %.2e lse %.2e dqkv %.2e\n", c.name.c_str(), dtype_name(dt),
              path == Path::Fma ? "fma" : "dispatch", e_out, e_lse, e_dq);
  EXPECT_LE(e_out, tol) << "out";
  EXPECT_LE(e_lse, 1e-5) << "lse";
  EXPECT_LE(e_dq, tol) << "dqkv";
}

std::vector<PackedCase> cases() {
  std::vector<PackedCase> out;
  for (int64_t D : {64, 128, 40}) {
    const std::string d = "_D" + std::to_string(D);
    // Tile edges (64-row query tiles, 32/64-row key tiles), 1-token samples, a long sample.
    out.push_back({"edges" + d, 300, 8, 2, D, {{1, 63, 1, 65, 100, 70}, {300}, {32, 32, 33, 31, 172}}});
    // Many short samples: most key tiles are skipped.
    out.push_back({"short" + d, 1024, 4, 4, D, {std::vector<int64_t>(64, 16), {7, 1000, 17}}});
  }
  out.push_back({"mqa_D64", 257, 4, 1, 64, {{129, 128}}});
  return out;
}

class CudaPackedAttention : public ::testing::TestWithParam<std::tuple<PackedCase, DType>> {};

TEST_P(CudaPackedAttention, MatchesCpuReference) {
  ZT_REQUIRE_GPU();
  compare(std::get<0>(GetParam()), std::get<1>(GetParam()), Path::Dispatch);
}

TEST_P(CudaPackedAttention, FmaKernelsMatchCpuReference) {
  ZT_REQUIRE_GPU();
  compare(std::get<0>(GetParam()), std::get<1>(GetParam()), Path::Fma);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaPackedAttention,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16)),
                         [](const ::testing::TestParamInfo<CudaPackedAttention::ParamType>& info) {
                           return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param));
                         });

// A segmentation of one sample per row gives the unsegmented kernels' bits.
TEST(CudaPackedAttention, OneSamplePerRowEqualsNoSegments) {
  ZT_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    const PackedCase c{"whole", 200, 4, 2, 64, {{200}, {200}}};
    const std::vector<float> v = randn(static_cast<size_t>(shape_numel(c.qkv_shape())), 5);
    OwnedTensor qkv = to_device(make(v, c.qkv_shape(), dt)), seg = to_device(starts_of(c));
    OwnedTensor a = device_nan(c.out_shape(), dt), la = device_nan(c.lse_shape(), DType::F32);
    OwnedTensor b = device_nan(c.out_shape(), dt), lb = device_nan(c.lse_shape(), DType::F32);
    ops::attention_forward(a, la, qkv, 4, 2, c.scale());
    ops::attention_forward(b, lb, qkv, 4, 2, c.scale(), seg);
    EXPECT_EQ(scaled_error(to_host(b), to_host(a)), 0.0) << dtype_name(dt);
    EXPECT_EQ(scaled_error(to_host(lb), to_host(la)), 0.0) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace zt
