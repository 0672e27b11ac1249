// CUDA token + position embedding against the CPU backend: forward (wte gather + wpe) for
// f32/bf16 outputs and f32/bf16/f16 tables; backward into pre-filled dwte/dwpe (the
// accumulation rule) with many repeated tokens, one token everywhere, a 50257-row vocabulary
// (16-bit sort keys), odd widths and N = 1; out-of-range ids are BadInput naming the first
// bad id and leave the gradients untouched; run-to-run determinism. gather_rows (the packed
// path's unchecked gather of position ids) matches the CPU and queues its work without
// waiting for the device; so does scatter_add_rows (its mirror, dwpe by position id), which
// also gives embedding_backward's dwte bits and drops out-of-range ids' rows.
//
// Tolerances, as max|gpu - cpu| / max|cpu|: the GPU sums in the CPU's order (rows of one
// token in ascending position, then one add into the gradient), so f32 results should be
// identical; 1e-6 is allowed. bf16/f16 outputs or gradients: 1e-2 (one rounding of the
// result). The CPU always gets the same rounded inputs as the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda_api.h"
#include "common/cuda_tensor.h"
#include "common/make_tensor.h"
#include "common/random.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"

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

constexpr double kF32Tol = 1e-6;
constexpr double kLowPrecisionTol = 1e-2;

struct Input {
  OwnedTensor cpu;
  OwnedTensor gpu;
};
// The values rounded to gpu_dtype, as a CPU tensor of cpu_dtype and a device tensor of gpu_dtype.
Input input(const std::vector<float>& v, const Shape& shape, DType gpu_dtype, DType cpu_dtype) {
  const OwnedTensor rounded = make(v, shape, gpu_dtype);
  return {make(rounded->to_f32_vector(), shape, cpu_dtype), to_device(rounded)};
}

OwnedTensor host_tokens(const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  OwnedTensor t({B, T}, DType::I32);
  EXPECT_EQ(ids.size(), static_cast<size_t>(B * T));
  if (!ids.empty()) std::memcpy(t->data(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

OwnedTensor nan_output(const Shape& shape, DType dtype) {
  const std::vector<float> nan(static_cast<size_t>(zt::shape_numel(shape)), std::numeric_limits<float>::quiet_NaN());
  return to_device(make(nan, shape, dtype));
}

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

std::vector<uint8_t> bytes_of(const Tensor& device) {
  const OwnedTensor h = to_host(device);
  const uint8_t* p = static_cast<const uint8_t*>(h->data());
  return std::vector<uint8_t>(p, p + h->nbytes());
}

enum class Tokens { Random, FewDistinct, AllSame };

struct EmbCase {
  int64_t B, T, V, C;
  DType act;    // out / dout on the GPU
  DType param;  // wte / wpe and their gradients
  bool wpe;
  Tokens tokens;
};

std::string case_name(const ::testing::TestParamInfo<EmbCase>& info) {
  const EmbCase& c = info.param;
  const char* tok = c.tokens == Tokens::Random ? "random" : c.tokens == Tokens::FewDistinct ? "few" : "same";
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_V" + std::to_string(c.V) + "_C" +
         std::to_string(c.C) + "_" + zt::dtype_name(c.act) + "_w" + zt::dtype_name(c.param) + (c.wpe ? "_wpe" : "") +
         "_" + tok;
}

std::vector<int32_t> make_ids(const EmbCase& k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(static_cast<size_t>(k.B * k.T));
  for (auto& id : ids) {
    switch (k.tokens) {
      case Tokens::Random:
        id = static_cast<int32_t>(gen() % static_cast<uint32_t>(k.V));
        break;
      case Tokens::FewDistinct:
        id = static_cast<int32_t>(gen() % std::min<uint32_t>(5, static_cast<uint32_t>(k.V)));
        break;
      case Tokens::AllSame:
        id = static_cast<int32_t>(k.V - 1);
        break;
    }
  }
  if (k.tokens == Tokens::Random && !ids.empty()) ids.back() = static_cast<int32_t>(k.V - 1);  // the last row
  return ids;
}

const EmbCase kCases[] = {
    {1, 1, 1, 768, DType::F32, DType::F32, true, Tokens::Random},
    {2, 5, 7, 13, DType::F32, DType::F32, true, Tokens::Random},
    {3, 4, 6, 9, DType::BF16, DType::F16, true, Tokens::Random},
    {4, 64, 50, 768, DType::F32, DType::F32, true, Tokens::FewDistinct},
    {4, 64, 50, 768, DType::BF16, DType::BF16, true, Tokens::FewDistinct},
    {2, 100, 1000, 1600, DType::F32, DType::BF16, false, Tokens::Random},
    {4, 256, 1000, 2048, DType::F32, DType::F32, false, Tokens::Random},
    {2, 128, 50257, 64, DType::F32, DType::F32, true, Tokens::Random},
    {8, 128, 10, 100, DType::F32, DType::F32, true, Tokens::AllSame},
    {2, 33, 300, 40, DType::BF16, DType::F32, true, Tokens::Random},
    {4, 64, 50, 768, DType::F16, DType::F16, true, Tokens::FewDistinct},
    {2, 33, 300, 40, DType::F16, DType::F32, true, Tokens::Random},
    {3, 4, 6, 9, DType::F16, DType::BF16, true, Tokens::Random},
};

class CudaEmbedding : public ::testing::TestWithParam<EmbCase> {};

TEST_P(CudaEmbedding, ForwardMatchesCpu) {
  ZT_REQUIRE_GPU();
  const EmbCase k = GetParam();
  const OwnedTensor tok_h = host_tokens(make_ids(k, 1), k.B, k.T);
  const OwnedTensor tok_d = to_device(tok_h);
  const Input wte = input(randn(static_cast<size_t>(k.V * k.C), 2), {k.V, k.C}, k.param, k.param);
  const int64_t P = k.T + 3;  // wpe may have more rows than T
  const Input wpe = input(randn(static_cast<size_t>(P * k.C), 3), {P, k.C}, k.param, k.param);
  const Shape act{k.B, k.T, k.C};
  OwnedTensor out_c(act, DType::F32);
  zt::ops::embedding_forward(out_c, tok_h, wte.cpu, k.wpe ? Tensor(wpe.cpu) : Tensor{});
  OwnedTensor out_g = nan_output(act, k.act);
  zt::ops::embedding_forward(out_g, tok_d, wte.gpu, k.wpe ? Tensor(wpe.gpu) : Tensor{});
  expect_close(out_g, out_c, k.act == DType::F32 ? kF32Tol : kLowPrecisionTol, "out");
}

TEST_P(CudaEmbedding, BackwardAccumulatesLikeCpu) {
  ZT_REQUIRE_GPU();
  const EmbCase k = GetParam();
  const OwnedTensor tok_h = host_tokens(make_ids(k, 4), k.B, k.T);
  const OwnedTensor tok_d = to_device(tok_h);
  const Shape act{k.B, k.T, k.C};
  const Input dout = input(randn(static_cast<size_t>(k.B * k.T * k.C), 5), act, k.act, DType::F32);
  // Pre-filled gradients: the result must be old + new.
  const Input dwte = input(randn(static_cast<size_t>(k.V * k.C), 6), {k.V, k.C}, k.param, k.param);
  const int64_t P = k.T + 2;
  const Input dwpe = input(randn(static_cast<size_t>(P * k.C), 7), {P, k.C}, k.param, k.param);
  zt::ops::embedding_backward(dwte.cpu, k.wpe ? Tensor(dwpe.cpu) : Tensor{}, dout.cpu, tok_h);
  zt::ops::embedding_backward(dwte.gpu, k.wpe ? Tensor(dwpe.gpu) : Tensor{}, dout.gpu, tok_d);
  const double tol = k.param == DType::F32 ? kF32Tol : kLowPrecisionTol;
  expect_close(dwte.gpu, dwte.cpu, tol, "dwte");
  expect_close(dwpe.gpu, dwpe.cpu, tol, "dwpe");  // untouched rows included
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaEmbedding, ::testing::ValuesIn(kCases), case_name);

// dwpe alone (dwte undefined): no token check, position sums only.
TEST(CudaEmbeddingOptional, PositionGradientAlone) {
  ZT_REQUIRE_GPU();
  const int64_t B = 3, T = 17, C = 24;
  const OwnedTensor tok_h = host_tokens(std::vector<int32_t>(static_cast<size_t>(B * T), 2), B, T);
  const Input dout = input(randn(B * T * C, 8), {B, T, C}, DType::F32, DType::F32);
  const Input dwpe = input(randn(T * C, 9), {T, C}, DType::F32, DType::F32);
  zt::ops::embedding_backward(Tensor{}, dwpe.cpu, dout.cpu, tok_h);
  zt::ops::embedding_backward(Tensor{}, dwpe.gpu, dout.gpu, to_device(tok_h));
  expect_close(dwpe.gpu, dwpe.cpu, kF32Tol, "dwpe alone");
}

// An out-of-range id is BadInput naming the first bad id and its position (device-side
// check); the backward leaves dwte and dwpe as they were.
TEST(CudaEmbeddingErrors, BadTokenIdIsBadInput) {
  ZT_REQUIRE_GPU();
  const int64_t B = 2, T = 8, V = 11, C = 16;
  const Input wte = input(randn(V * C, 10), {V, C}, DType::F32, DType::F32);
  const Input dout = input(randn(B * T * C, 11), {B, T, C}, DType::F32, DType::F32);
  const Input dwte = input(randn(V * C, 12), {V, C}, DType::F32, DType::F32);
  const Input dwpe = input(randn(T * C, 13), {T, C}, DType::F32, DType::F32);
  OwnedTensor out({B, T, C}, DType::F32, Device::cuda());
  for (int32_t bad : {11, -1, 50257}) {
    std::vector<int32_t> ids(static_cast<size_t>(B * T), 3);
    ids[5] = bad;
    ids[9] = 12;  // a later bad id must not be the one reported
    const OwnedTensor tok_d = to_device(host_tokens(ids, B, T));
    try {
      zt::ops::embedding_forward(out, tok_d, wte.gpu, Tensor{});
      ADD_FAILURE() << "no error for token " << bad;
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad) + " at position 5"), std::string::npos) << msg;
      EXPECT_NE(msg.find("size 11"), std::string::npos) << msg;
    }
    const std::vector<uint8_t> before_e = bytes_of(dwte.gpu), before_p = bytes_of(dwpe.gpu);
    try {
      zt::ops::embedding_backward(dwte.gpu, dwpe.gpu, dout.gpu, tok_d);
      ADD_FAILURE() << "no error for token " << bad << " in the backward";
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad) + " at position 5"), std::string::npos) << msg;
    }
    EXPECT_EQ(bytes_of(dwte.gpu), before_e) << "dwte changed despite a bad id";
    EXPECT_EQ(bytes_of(dwpe.gpu), before_p) << "dwpe changed despite a bad id";
  }
  // After the errors the op works again (the flag is per call).
  const OwnedTensor good = to_device(host_tokens(std::vector<int32_t>(static_cast<size_t>(B * T), 10), B, T));
  EXPECT_NO_THROW(zt::ops::embedding_forward(out, good, wte.gpu, Tensor{}));
}

// Same inputs, same bits; from zero, two calls give exactly twice one call.
TEST(CudaEmbeddingDeterminism, BackwardIsDeterministicAndAccumulates) {
  ZT_REQUIRE_GPU();
  const int64_t B = 8, T = 512, V = 300, C = 768;
  std::mt19937 gen(21);
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (auto& id : ids) id = static_cast<int32_t>(gen() % 40);  // heavy repeats
  const OwnedTensor tok_d = to_device(host_tokens(ids, B, T));
  const Input dout = input(randn(B * T * C, 22), {B, T, C}, DType::F32, DType::F32);
  auto run = [&](int calls) {
    OwnedTensor dwte = OwnedTensor::zeros({V, C}, DType::F32, Device::cuda());
    OwnedTensor dwpe = OwnedTensor::zeros({T, C}, DType::F32, Device::cuda());
    for (int i = 0; i < calls; ++i) zt::ops::embedding_backward(dwte, dwpe, dout.gpu, tok_d);
    return std::make_pair(to_host(dwte)->to_f32_vector(), to_host(dwpe)->to_f32_vector());
  };
  const auto a = run(1), b = run(1), twice = run(2);
  EXPECT_EQ(a.first, b.first) << "dwte differs run to run";
  EXPECT_EQ(a.second, b.second) << "dwpe differs run to run";
  for (size_t i = 0; i < a.first.size(); ++i) ASSERT_EQ(twice.first[i], 2.0f * a.first[i]) << "dwte at " << i;
  for (size_t i = 0; i < a.second.size(); ++i) ASSERT_EQ(twice.second[i], 2.0f * a.second[i]) << "dwpe at " << i;
}

// Unaligned device views (C a multiple of 8, pointers off 16 bytes): the scalar path.
TEST(CudaEmbeddingAlignment, UnalignedViewsMatchCpu) {
  ZT_REQUIRE_GPU();
  const int64_t B = 2, T = 9, V = 20, C = 64;
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7) % V);
  const OwnedTensor tok_h = host_tokens(ids, B, T);
  const std::vector<float> wv = randn(V * C, 31), dv = randn(B * T * C, 32), gv = randn(V * C, 33);
  auto shifted = [](const std::vector<float>& v) {
    std::vector<float> padded(v.size() + 1, 0.0f);
    std::copy(v.begin(), v.end(), padded.begin() + 1);
    return to_device(make(padded, {static_cast<int64_t>(padded.size())}));
  };
  auto view = [](const OwnedTensor& buf, Shape shape) {
    return Tensor(static_cast<float*>(buf->data()) + 1, std::move(shape), DType::F32, Device::cuda());
  };
  const OwnedTensor wbuf = shifted(wv), dbuf = shifted(dv), gbuf = shifted(gv),
                    obuf = shifted(std::vector<float>(static_cast<size_t>(B * T * C), NAN));
  const OwnedTensor wte_c = make(wv, {V, C}), dout_c = make(dv, {B, T, C}), dwte_c = make(gv, {V, C});
  OwnedTensor out_c({B, T, C}, DType::F32);
  zt::ops::embedding_forward(out_c, tok_h, wte_c, Tensor{});
  const Tensor out_g = view(obuf, {B, T, C});
  zt::ops::embedding_forward(out_g, to_device(tok_h), view(wbuf, {V, C}), Tensor{});
  expect_close(out_g, out_c, kF32Tol, "unaligned out");
  zt::ops::embedding_backward(dwte_c, Tensor{}, dout_c, tok_h);
  const Tensor dwte_g = view(gbuf, {V, C});
  zt::ops::embedding_backward(dwte_g, Tensor{}, view(dbuf, {B, T, C}), to_device(tok_h));
  expect_close(dwte_g, dwte_c, kF32Tol, "unaligned dwte");
}

// gather_rows against the CPU: f32/bf16/f16 outputs and tables, flat and [B, T] ids (repeats,
// both ends of the table), vector (C % 8 == 0) and scalar widths.
TEST(CudaGatherRows, MatchesCpu) {
  ZT_REQUIRE_GPU();
  struct Case {
    int64_t N, R, C;
    DType act, table;
  };
  for (const Case k : {Case{1, 1, 64, DType::F32, DType::F32}, Case{37, 16, 13, DType::F32, DType::F32},
                       Case{512, 512, 64, DType::F32, DType::F32}, Case{300, 40, 768, DType::BF16, DType::BF16},
                       Case{33, 50, 9, DType::F16, DType::F32}, Case{64, 64, 96, DType::F32, DType::BF16}}) {
    SCOPED_TRACE("N " + std::to_string(k.N) + " C " + std::to_string(k.C) + " " + zt::dtype_name(k.act) + " table " +
                 zt::dtype_name(k.table));
    std::mt19937 gen(static_cast<uint32_t>(k.N + k.C));
    std::vector<int32_t> ids(static_cast<size_t>(k.N));
    for (auto& id : ids) id = static_cast<int32_t>(gen() % static_cast<uint32_t>(k.R));
    ids.front() = static_cast<int32_t>(k.R - 1);
    ids.back() = 0;
    const Input table = input(randn(static_cast<size_t>(k.R * k.C), 41), {k.R, k.C}, k.table, k.table);
    const OwnedTensor ids_h = host_tokens(ids, 1, k.N);
    OwnedTensor out_c({k.N, k.C}, DType::F32);
    zt::ops::gather_rows(out_c, table.cpu, ids_h->reshape({k.N}));
    OwnedTensor out_g = nan_output({k.N, k.C}, k.act);
    zt::ops::gather_rows(out_g, table.gpu, to_device(ids_h)->reshape({k.N}));
    expect_close(out_g, out_c, k.act == DType::F32 ? 0.0 : kLowPrecisionTol, "flat ids");
    // [1, N] ids into [1, N, C]: the layout embed_forward_at uses.
    OwnedTensor out_3d = nan_output({1, k.N, k.C}, k.act);
    zt::ops::gather_rows(out_3d, table.gpu, to_device(ids_h));
    expect_close(out_3d, out_c, k.act == DType::F32 ? 0.0 : kLowPrecisionTol, "[1, N] ids");
  }
}

// ~100 ms of adds queued on the compute stream with a marker event recorded behind them: an
// op run right after that does not wait for the device returns with the marker pending.
struct QueuedAdds {
  static constexpr int kAdds = 200;    // ~0.75 GiB of traffic each: ~50 ms or more on an H100/H200
  const int64_t n = int64_t{1} << 26;  // 256 MiB per f32 tensor
  OwnedTensor acc = OwnedTensor::zeros({n}, DType::F32, Device::cuda());
  OwnedTensor one = to_device(make(std::vector<float>(static_cast<size_t>(n), 1.0f), {n}));
  zt::cuda::CopyStream marker_stream;
  // Waits for the device (nothing else pending), queues the adds, returns the marker.
  zt::cuda::CopyEvent queue() {
    zt::cuda::synchronize();
    for (int i = 0; i < kAdds; ++i) zt::ops::add(acc, acc, one);
    marker_stream.wait_for_compute();
    return marker_stream.record();
  }
  void expect_all_ran() const {
    const OwnedTensor acc_h = to_host(acc);
    EXPECT_EQ(acc_h->get_f32(0), static_cast<float>(kAdds));
    EXPECT_EQ(acc_h->get_f32(n - 1), static_cast<float>(kAdds));
  }
};

// No host wait: with ~100 ms of adds queued on the compute stream, gather_rows returns
// before they finish (a marker event recorded behind the adds, before the gather, is still
// pending). embedding_forward's checked gather would wait for all of them. Everything is
// allocated and copied before the adds, so nothing else synchronises.
TEST(CudaGatherRows, DoesNotWaitForTheDevice) {
  ZT_REQUIRE_GPU();
  const int64_t R = 64, C = 128, N = 4096;
  QueuedAdds adds;
  const Input table = input(randn(static_cast<size_t>(R * C), 42), {R, C}, DType::F32, DType::F32);
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5) % R);
  const OwnedTensor ids_h = host_tokens(ids, 1, N);
  const OwnedTensor ids_d = to_device(ids_h);
  OwnedTensor out_g = nan_output({1, N, C}, DType::F32);
  const zt::cuda::CopyEvent adds_done = adds.queue();
  zt::ops::gather_rows(out_g, table.gpu, ids_d);
  EXPECT_FALSE(adds_done.done()) << "gather_rows waited for the work queued before it";

  OwnedTensor out_c({1, N, C}, DType::F32);
  zt::ops::gather_rows(out_c, table.cpu, ids_h);
  expect_close(out_g, out_c, 0.0, "gather after the adds");  // to_host waits for everything
  adds.expect_all_ran();
}

// scatter_add_rows against the CPU into pre-filled tables: f32/bf16/f16 rows and tables, [B, T]
// and flat ids (repeats, both ends of the table, few distinct ids), vector and scalar widths;
// and the same bytes as the checked embedding_backward on the GPU (the same kernels and sums).
TEST(CudaScatterAddRows, MatchesCpuAndEmbeddingBackward) {
  ZT_REQUIRE_GPU();
  struct Case {
    int64_t B, T, R, C;
    DType act, table;
    uint32_t distinct;  // ids drawn from [0, distinct)
  };
  for (const Case k :
       {Case{1, 1, 1, 64, DType::F32, DType::F32, 1}, Case{2, 19, 16, 13, DType::F32, DType::F32, 16},
        Case{4, 128, 512, 64, DType::F32, DType::F32, 512}, Case{2, 150, 40, 768, DType::BF16, DType::BF16, 40},
        Case{3, 11, 50, 9, DType::F16, DType::F32, 50}, Case{1, 64, 64, 96, DType::F32, DType::BF16, 64},
        Case{8, 64, 64, 40, DType::F32, DType::F32, 3}}) {
    SCOPED_TRACE("B " + std::to_string(k.B) + " T " + std::to_string(k.T) + " C " + std::to_string(k.C) + " " +
                 zt::dtype_name(k.act) + " table " + zt::dtype_name(k.table));
    const int64_t N = k.B * k.T;
    std::mt19937 gen(static_cast<uint32_t>(N + k.C));
    std::vector<int32_t> ids(static_cast<size_t>(N));
    for (auto& id : ids) id = static_cast<int32_t>(gen() % k.distinct);
    ids.front() = static_cast<int32_t>(k.R - 1);
    ids.back() = 0;
    const OwnedTensor ids_h = host_tokens(ids, k.B, k.T);
    const OwnedTensor ids_d = to_device(ids_h);
    const Input rows = input(randn(static_cast<size_t>(N * k.C), 51), {k.B, k.T, k.C}, k.act, DType::F32);
    const std::vector<float> init = randn(static_cast<size_t>(k.R * k.C), 52);
    const Input dtable = input(init, {k.R, k.C}, k.table, k.table);
    const double tol = k.table == DType::F32 ? kF32Tol : kLowPrecisionTol;
    zt::ops::scatter_add_rows(dtable.cpu, rows.cpu, ids_h);
    zt::ops::scatter_add_rows(dtable.gpu, rows.gpu, ids_d);
    expect_close(dtable.gpu, dtable.cpu, tol, "[B, T] ids");

    const Input checked = input(init, {k.R, k.C}, k.table, k.table);
    zt::ops::embedding_backward(checked.gpu, Tensor{}, rows.gpu, ids_d);
    EXPECT_EQ(bytes_of(dtable.gpu), bytes_of(checked.gpu)) << "not embedding_backward's dwte";

    // Flat ids and [N, C] rows: the same result.
    const Input flat = input(init, {k.R, k.C}, k.table, k.table);
    zt::ops::scatter_add_rows(flat.gpu, rows.gpu->reshape({N, k.C}), ids_d->reshape({N}));
    EXPECT_EQ(bytes_of(flat.gpu), bytes_of(dtable.gpu)) << "flat ids";
  }
}

// Trusted ids are not checked: bad ones (a caller's bug; here also ids whose low bits equal
// a valid id's, which must not split its group) are no error, their rows are dropped as on
// the CPU, and nothing outside the table changes (guard rows around a view of a bigger
// buffer).
TEST(CudaScatterAddRows, OutOfRangeIdsAreDropped) {
  ZT_REQUIRE_GPU();
  const int64_t R = 5, C = 16, N = 12;
  const std::vector<int32_t> ids = {1, 5, 1, -1, 9, 1, 3, 2147483647, 1, 13, 0, -8};
  const OwnedTensor ids_h = host_tokens(ids, 1, N);
  const Input rows = input(randn(N * C, 53), {1, N, C}, DType::F32, DType::F32);
  const std::vector<float> init = randn((R + 2) * C, 54);  // one guard row either side
  const OwnedTensor buf = to_device(make(init, {R + 2, C}));
  const Tensor dtable_g(static_cast<float*>(buf->data()) + C, {R, C}, DType::F32, Device::cuda());
  OwnedTensor dtable_c = make(std::vector<float>(init.begin() + C, init.end() - C), {R, C});
  EXPECT_NO_THROW(zt::ops::scatter_add_rows(dtable_g, rows.gpu, to_device(ids_h)));
  zt::ops::scatter_add_rows(dtable_c, rows.cpu, ids_h);
  expect_close(dtable_g, dtable_c, 0.0, "valid rows");
  const std::vector<float> after = to_host(buf)->to_f32_vector();
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(after[static_cast<size_t>(c)], init[static_cast<size_t>(c)]) << "guard row before, channel " << c;
    const size_t last = static_cast<size_t>((R + 1) * C + c);
    EXPECT_EQ(after[last], init[last]) << "guard row after, channel " << c;
  }
}

// No host wait, as CudaGatherRows.DoesNotWaitForTheDevice: with ~100 ms of adds queued,
// scatter_add_rows returns before they finish. A first call beforehand puts its scratch
// (sort buffers) in the caching allocator, so the timed call allocates nothing new.
TEST(CudaScatterAddRows, DoesNotWaitForTheDevice) {
  ZT_REQUIRE_GPU();
  const int64_t R = 64, C = 128, N = 4096;
  QueuedAdds adds;
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5) % R);
  const OwnedTensor ids_h = host_tokens(ids, 1, N);
  const OwnedTensor ids_d = to_device(ids_h);
  const Input rows = input(randn(static_cast<size_t>(N * C), 55), {1, N, C}, DType::F32, DType::F32);
  const Input dtable = input(randn(static_cast<size_t>(R * C), 56), {R, C}, DType::F32, DType::F32);
  OwnedTensor warm = OwnedTensor::zeros({R, C}, DType::F32, Device::cuda());
  zt::ops::scatter_add_rows(warm, rows.gpu, ids_d);
  const zt::cuda::CopyEvent adds_done = adds.queue();
  zt::ops::scatter_add_rows(dtable.gpu, rows.gpu, ids_d);
  EXPECT_FALSE(adds_done.done()) << "scatter_add_rows waited for the work queued before it";

  zt::ops::scatter_add_rows(dtable.cpu, rows.cpu, ids_h);
  expect_close(dtable.gpu, dtable.cpu, kF32Tol, "scatter after the adds");  // to_host waits for everything
  adds.expect_all_ran();
}

}  // namespace
