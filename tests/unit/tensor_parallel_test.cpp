// Tensor parallelism's seam (model/weights.h: tensor_parallel_shard): the shards the
// weights table assigns to each rank compute a block exactly as Megatron-style tensor
// parallelism needs. Each rank runs the unchanged ops (packed q/k/v GEMM, RoPE, GQA
// attention, [gate; up] GEMM) on its shard with the local head and feature counts; its
// attention output and MLP activation are its columns of the whole block's, and the
// row-parallel projections' partial outputs sum to the whole block's. The collectives
// (the sums, the gathers) are the test's own here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/linear.h"
#include "ops/rope.h"

namespace zt::model {
namespace {

int64_t span_rows(const TensorParallelShard& s) {
  int64_t n = 0;
  for (const RowSpan& r : s.rows) n += r.size();
  return n;
}

// The shard of `w` (stored in `layout`; a vector when 1-D), stored the same way.
OwnedTensor take(const Tensor& w, WeightLayout layout, const TensorParallelShard& s) {
  const float* src = w.data_as<float>();
  const int64_t rows = span_rows(s);
  if (w.dim() == 1) {
    OwnedTensor out({rows}, DType::F32);
    int64_t at = 0;
    for (const RowSpan& r : s.rows)
      for (int64_t i = r.begin; i < r.end; ++i) out.data<float>()[at++] = src[i];
    return out;
  }
  const int64_t cols = s.cols.size();
  if (layout == WeightLayout::OutIn) {  // [O, I]
    const int64_t ld = w.size(1);
    OwnedTensor out({rows, cols}, DType::F32);
    int64_t at = 0;
    for (const RowSpan& r : s.rows)
      for (int64_t i = r.begin; i < r.end; ++i, ++at)
        std::memcpy(out.data<float>() + at * cols, src + i * ld + s.cols.begin, sizeof(float) * cols);
    return out;
  }
  // InOut (GPT-2's Conv1D): [I, O], the logical rows are columns.
  const int64_t ld = w.size(1);
  OwnedTensor out({cols, rows}, DType::F32);
  for (int64_t i = 0; i < cols; ++i) {
    int64_t at = 0;
    for (const RowSpan& r : s.rows)
      for (int64_t o = r.begin; o < r.end; ++o) out.data<float>()[i * rows + at++] = src[(s.cols.begin + i) * ld + o];
  }
  return out;
}

// Columns [begin, begin + n) of a [N, W] tensor, as a contiguous copy.
std::vector<float> columns(const Tensor& t, int64_t begin, int64_t n) {
  const int64_t N = t.size(0), W = t.size(1);
  std::vector<float> out(static_cast<size_t>(N * n));
  for (int64_t i = 0; i < N; ++i)
    std::memcpy(out.data() + i * n, t.data_as<float>() + i * W + begin, sizeof(float) * n);
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst, tol) << what;
}

std::vector<float> all(const Tensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

OwnedTensor random_rows(int64_t n, int64_t w, uint64_t seed) {
  OwnedTensor t({n, w}, DType::F32);
  Philox rng(seed, 1);
  for (int64_t i = 0; i < n * w; ++i) t.data<float>()[i] = rng.uniform(static_cast<uint64_t>(i)) * 2.0f - 1.0f;
  return t;
}

void expect_block_shards_compose(const std::string& preset, int tp) {
  SCOPED_TRACE(preset + " tp=" + std::to_string(tp));
  const ModelConfig c = preset_config(preset);
  Transformer model(c, ModelOptions{});
  model.init_weights(3);
  const UnitWeights w(block_unit(model.registry(), 0), Storage::Values);
  const int64_t B = 2, T = 16, N = B * T, C = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  const int Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bool rotary = c.position == PositionKind::Rotary;
  const bool gated = c.mlp == MlpKind::GatedSilu;
  ops::RopeTable rope;
  if (rotary) rope = ops::make_rope_table(c.rope, static_cast<int>(T));
  const OwnedTensor x = random_rows(N, C, 11), h = random_rows(N, C, 12);

  // The whole block's attention and MLP branches (the norms are replicated: inputs given).
  OwnedTensor qkv({B, T, c.qkv_width()}, DType::F32), att({B, T, Hq * D}, DType::F32), lse({B, Hq, T}, DType::F32);
  ops::linear_forward(qkv->reshape({N, c.qkv_width()}), x, w[Field::QkvWeight], w[Field::QkvBias],
                      w.layout(Field::QkvWeight));
  if (rotary) ops::rope_forward_inplace(qkv, Hq, Hkv, rope);
  ops::attention_forward(att, lse, qkv, Hq, Hkv, scale);
  OwnedTensor proj({N, C}, DType::F32);
  ops::linear_forward(proj, att->reshape({N, Hq * D}), w[Field::AttnOutWeight], w[Field::AttnOutBias],
                      w.layout(Field::AttnOutWeight));
  const int64_t fc_width = gated ? 2 * F : F;
  OwnedTensor fc({N, fc_width}, DType::F32), act({N, F}, DType::F32), down({N, C}, DType::F32);
  ops::linear_forward(fc, h, w[Field::MlpInWeight], w[Field::MlpInBias], w.layout(Field::MlpInWeight));
  if (gated)
    ops::swiglu_forward(act, fc->narrow(1, 0, F), fc->narrow(1, F, F));
  else
    ops::gelu_forward(act, fc);
  ops::linear_forward(down, act, w[Field::MlpOutWeight], w[Field::MlpOutBias], w.layout(Field::MlpOutWeight));

  // Each rank on its shards, with the local shape; the row-parallel outputs summed.
  const ModelConfig lc = tensor_parallel_config(c, tp);
  const int lHq = static_cast<int>(lc.num_heads), lHkv = static_cast<int>(lc.num_kv_heads);
  const int64_t lF = lc.intermediate_size, lfc_width = gated ? 2 * lF : lF;
  std::vector<float> proj_sum(static_cast<size_t>(N * C), 0.0f), down_sum(static_cast<size_t>(N * C), 0.0f);
  const auto shard = [&](Field f, int r) {
    const Tensor& t = w[f];
    if (!t.defined()) return OwnedTensor();
    return take(t, w.layout(f), tensor_parallel_shard(c, f, r, tp));
  };
  for (int r = 0; r < tp; ++r) {
    const OwnedTensor wqkv = shard(Field::QkvWeight, r), bqkv = shard(Field::QkvBias, r);
    ASSERT_EQ(span_rows(tensor_parallel_shard(c, Field::QkvWeight, r, tp)), lc.qkv_width());
    OwnedTensor lqkv({B, T, lc.qkv_width()}, DType::F32), latt({B, T, lHq * D}, DType::F32),
        llse({B, lHq, T}, DType::F32);
    ops::linear_forward(lqkv->reshape({N, lc.qkv_width()}), x, wqkv, bqkv, w.layout(Field::QkvWeight));
    if (rotary) ops::rope_forward_inplace(lqkv, lHq, lHkv, rope);
    ops::attention_forward(latt, llse, lqkv, lHq, lHkv, scale);
    // Rank r's heads are query heads [r Hq/tp, (r+1) Hq/tp): its columns of the whole output.
    expect_near(all(latt), columns(att->reshape({N, Hq * D}), r * lHq * D, lHq * D), 2e-5f,
                "attention output of rank " + std::to_string(r));

    OwnedTensor lproj({N, C}, DType::F32);
    ops::linear_forward(lproj, latt->reshape({N, lHq * D}), shard(Field::AttnOutWeight, r), Tensor(),
                        w.layout(Field::AttnOutWeight));
    for (int64_t i = 0; i < N * C; ++i) proj_sum[i] += lproj.data<float>()[i];

    OwnedTensor lfc({N, lfc_width}, DType::F32), lact({N, lF}, DType::F32), ldown({N, C}, DType::F32);
    ops::linear_forward(lfc, h, shard(Field::MlpInWeight, r), shard(Field::MlpInBias, r), w.layout(Field::MlpInWeight));
    if (gated)
      ops::swiglu_forward(lact, lfc->narrow(1, 0, lF), lfc->narrow(1, lF, lF));
    else
      ops::gelu_forward(lact, lfc);
    expect_near(all(lact), columns(act, r * lF, lF), 2e-5f, "MLP activation of rank " + std::to_string(r));
    ops::linear_forward(ldown, lact, shard(Field::MlpOutWeight, r), Tensor(), w.layout(Field::MlpOutWeight));
    for (int64_t i = 0; i < N * C; ++i) down_sum[i] += ldown.data<float>()[i];
  }
  // The row-parallel layers' bias is added once, after the sum (Megatron's RowParallelLinear).
  const auto add_bias = [&](std::vector<float>& v, Field f) {
    if (!w[f].defined()) return;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < C; ++j) v[i * C + j] += w[f].data_as<float>()[j];
  };
  add_bias(proj_sum, Field::AttnOutBias);
  add_bias(down_sum, Field::MlpOutBias);
  expect_near(proj_sum, all(proj), 1e-4f, "attention projection summed over ranks");
  expect_near(down_sum, all(down), 1e-4f, "MLP down projection summed over ranks");
}

TEST(TensorParallelSeam, BlockShardsComposeToTheWholeBlock) {
  expect_block_shards_compose("tiny-llama", 2);  // GQA: 4 query heads over 2 kv heads, RoPE, [gate; up]
  expect_block_shards_compose("tiny-gpt2", 2);   // Conv1D layouts, biases, GELU
  expect_block_shards_compose("tiny-gpt2", 4);
}

TEST(TensorParallelSeam, ColumnParallelShardsTakeTheirShareOfEveryGroup) {
  const ModelConfig c = preset_config("tiny-llama");  // q 128 rows, k and v 64 each
  const TensorParallelShard s = tensor_parallel_shard(c, Field::QkvWeight, 1, 2);
  ASSERT_EQ(s.rows.size(), 3u);
  EXPECT_EQ(s.rows[0].begin, 64);
  EXPECT_EQ(s.rows[0].end, 128);
  EXPECT_EQ(s.rows[1].begin, 128 + 32);
  EXPECT_EQ(s.rows[2].begin, 128 + 64 + 32);
  EXPECT_EQ(s.cols.begin, 0);
  EXPECT_EQ(s.cols.end, c.hidden_size);
  const TensorParallelShard out = tensor_parallel_shard(c, Field::AttnOutWeight, 1, 2);
  EXPECT_EQ(out.cols.begin, 64);
  EXPECT_EQ(out.cols.end, 128);
  const TensorParallelShard norm = tensor_parallel_shard(c, Field::Norm1Weight, 1, 2);
  EXPECT_EQ(norm.rows.front().size(), c.hidden_size);
}

TEST(TensorParallelSeam, ASizeThatDoesNotDivideTheHeadsIsABadInputNamingTheKey) {
  const ModelConfig c = preset_config("tiny-llama");  // 2 kv heads
  try {
    tensor_parallel_config(c, 4);
    FAIL() << "expected BadInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt::model
