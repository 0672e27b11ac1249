// The parallel linear (parallel/linear.h) under mpirun at 1, 2 and 4 ranks: a column-then-
// row MLP pair (MLP in, activation, MLP out) with LoRA adapters on both linears, each rank
// holding its tensor_parallel_shard of the weights (model/weights.h), gives the one-rank
// output and input gradient on every rank, and each rank's parameter gradients are its
// shards of the one-rank gradients (f32 tolerance). GPT-2 (Conv1D layout, biases, GELU) and
// Llama ([gate; up] packed, SiLU gate).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/mpi_communicator.h"
#include "common/small_models.h"
#include "common/tp_slice.h"
#include "core/rng.h"
#include "model/hf_names.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "ops/activation.h"
#include "parallel/linear.h"

namespace zt {
namespace {

using model::Field;
using model::RowSpan;
using model::TensorParallelShard;
using parallel::LinearKind;

comm::Communicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> c = comm::MpiCommunicator::world();
  return *c;
}

OwnedTensor random_tensor(Shape shape, uint64_t seed, float scale = 1.0f) {
  OwnedTensor t(std::move(shape), DType::F32);
  Philox rng(seed, 7);
  for (int64_t i = 0; i < t->numel(); ++i)
    t.data<float>()[i] = (rng.uniform(static_cast<uint64_t>(i)) * 2.0f - 1.0f) * scale;
  return t;
}

OwnedTensor zeros(Shape shape) { return OwnedTensor::zeros(std::move(shape), DType::F32); }

OwnedTensor zeros_like(const Tensor& t) { return zeros(t.shape()); }

// Rows `rows` and columns `cols` of a [R, C] matrix.
OwnedTensor cut(const Tensor& m, const std::vector<RowSpan>& rows, RowSpan cols) {
  TensorParallelShard s;
  s.rows = rows;
  s.cols = cols;
  return testing::take_shard(m, WeightLayout::OutIn, s);
}

void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_f32_vector(), w = want.to_f32_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
  EXPECT_LE(worst, 2e-5f) << what << " (rank " << world().rank() << " of " << world().size() << ")";
}

constexpr int64_t kR = 4;  // LoRA rank

// One LoRA adapter's tensors (values and gradients).
struct Adapter {
  OwnedTensor a, b, da, db;
  int64_t col_begin = 0, cols = 0;
};

// The pair's tensors on one rank (whole when tp = 1).
struct Pair {
  OwnedTensor w_in, b_in, w_out, b_out;
  std::vector<Adapter> in_adapters, out_adapters;  // out: one
  OwnedTensor h, dh;                               // LoRA scratch
};

parallel::LinearLora lora_of(std::vector<Adapter>& ads, int64_t in_features, const Pair& p) {
  parallel::LinearLora l;
  l.r = kR;
  l.scaling = 0.75f;
  l.scratch = {Tensor(), Tensor(), p.h, p.dh};
  for (Adapter& a : ads)
    l.adapters.push_back({a.a, a.b, a.da, a.db, a.col_begin, a.cols, in_features, Philox(1, 2), "adapter"});
  return l;
}

struct Outputs {
  OwnedTensor y, dx, dw_in, db_in, dw_out, db_out;
};

// y = out(act(in(x))), then the backward of L = sum(y * dy).
void run_pair(const model::ModelConfig& lc, Pair& p, const parallel::Group& group, const Tensor& x, const Tensor& dy,
              WeightLayout layout, Outputs& o) {
  const int64_t N = x.size(0), C = x.size(1), F = lc.intermediate_size;
  const bool gated = lc.mlp == model::MlpKind::GatedSilu;
  const int64_t fc_width = gated ? 2 * F : F;
  OwnedTensor fc = zeros({N, fc_width}), act = zeros({N, F});
  o.y = zeros({N, C});
  const parallel::LinearLora in_lora = lora_of(p.in_adapters, C, p), out_lora = lora_of(p.out_adapters, F, p);
  parallel::Linear in{LinearKind::Column, group, p.w_in, p.b_in, layout, &in_lora, parallel::Precision::Activations};
  parallel::Linear out{LinearKind::Row, group, p.w_out, p.b_out, layout, &out_lora, parallel::Precision::Activations};
  parallel::linear_forward(in, fc, x);
  if (gated)
    ops::swiglu_forward(act, fc->narrow(1, 0, F), fc->narrow(1, F, F));
  else
    ops::gelu_forward(act, fc);
  parallel::linear_forward(out, o.y, act);

  OwnedTensor d_act = zeros({N, F}), d_fc = zeros({N, fc_width});
  o.dx = zeros({N, C});
  o.dw_in = zeros_like(p.w_in);
  o.dw_out = zeros_like(p.w_out);
  if (p.b_in->defined()) o.db_in = zeros_like(p.b_in);
  if (p.b_out->defined()) o.db_out = zeros_like(p.b_out);
  parallel::linear_backward(out, {o.dw_out, o.db_out}, d_act, dy, act);
  if (gated)
    ops::swiglu_backward(d_fc->narrow(1, 0, F), d_fc->narrow(1, F, F), d_act, fc->narrow(1, 0, F), fc->narrow(1, F, F));
  else
    ops::gelu_backward(d_fc, d_act, fc);
  parallel::linear_backward(in, {o.dw_in, o.db_in}, o.dx, d_fc, x);
}

Adapter adapter(int64_t rows, int64_t in, int64_t col_begin, uint64_t seed) {
  Adapter a{random_tensor({kR, in}, seed, 0.5f),
            random_tensor({rows, kR}, seed + 1, 0.5f),
            zeros({kR, in}),
            zeros({rows, kR}),
            col_begin,
            rows};
  return a;
}

void expect_pair_matches_one_rank(model::ModelConfig c) {
  const int tp = world().size(), rank = world().rank();
  SCOPED_TRACE(model::family_name(c.family));
  model::Transformer m(c, model::ModelOptions{});
  m.init_weights(5);
  const model::UnitWeights w(model::block_unit(m.registry(), 0), model::Storage::Values);
  const WeightLayout layout = w.layout(Field::MlpInWeight);
  const int64_t N = 12, C = c.hidden_size, F = c.intermediate_size;
  const bool gated = c.mlp == model::MlpKind::GatedSilu;
  const OwnedTensor x = random_tensor({N, C}, 11), dy = random_tensor({N, C}, 12);
  const auto copy = [](const Tensor& t) {
    if (!t.defined()) return OwnedTensor();
    OwnedTensor o(t.shape(), DType::F32);
    std::memcpy(o.data<float>(), t.data_as<float>(), static_cast<size_t>(t.numel()) * sizeof(float));
    return o;
  };

  // One rank, the weights whole.
  Pair whole{copy(w[Field::MlpInWeight]),
             copy(w[Field::MlpInBias]),
             copy(w[Field::MlpOutWeight]),
             copy(w[Field::MlpOutBias]),
             {},
             {},
             zeros({N * kR}),
             zeros({N * kR})};
  whole.out_adapters.push_back(adapter(C, F, 0, 40));
  const int groups = gated ? 2 : 1;
  for (int g = 0; g < groups; ++g) whole.in_adapters.push_back(adapter(F, C, g * F, 20 + 2 * g));
  Outputs ref;
  run_pair(c, whole, parallel::Group(), x, dy, layout, ref);

  // This rank's shards.
  const model::ModelConfig lc = model::tensor_parallel_config(c, tp);
  const int64_t lF = lc.intermediate_size;
  const auto shard = [&](const Tensor& t, Field f) {
    if (!t.defined()) return OwnedTensor();
    return testing::take_shard(t, layout, model::tensor_parallel_shard(c, f, rank, tp));
  };
  const RowSpan mine{rank * lF, (rank + 1) * lF};
  Pair local{shard(whole.w_in, Field::MlpInWeight),
             shard(whole.b_in, Field::MlpInBias),
             shard(whole.w_out, Field::MlpOutWeight),
             shard(whole.b_out, Field::MlpOutBias),
             {},
             {},
             zeros({N * kR}),
             zeros({N * kR})};
  for (int g = 0; g < groups; ++g) {  // Column: A whole, B the rank's rows of its group
    const Adapter& a = whole.in_adapters[static_cast<size_t>(g)];
    local.in_adapters.push_back({copy(a.a), cut(a.b, {mine}, {0, kR}), zeros({kR, C}), zeros({lF, kR}), g * lF, lF});
  }
  const Adapter& oa = whole.out_adapters[0];  // Row: A the rank's input columns, B whole
  local.out_adapters.push_back({cut(oa.a, {{0, kR}}, mine), copy(oa.b), zeros({kR, lF}), zeros({C, kR}), 0, C});
  Outputs got;
  run_pair(lc, local, comm::Group(world()), x, dy, layout, got);

  expect_near(got.y, ref.y, "y");
  expect_near(got.dx, ref.dx, "dx");
  expect_near(got.dw_in, shard(ref.dw_in, Field::MlpInWeight), "d MLP in weight");
  expect_near(got.dw_out, shard(ref.dw_out, Field::MlpOutWeight), "d MLP out weight");
  if (ref.db_in->defined()) expect_near(got.db_in, shard(ref.db_in, Field::MlpInBias), "d MLP in bias");
  if (ref.db_out->defined()) expect_near(got.db_out, ref.db_out, "d MLP out bias");
  for (int g = 0; g < groups; ++g) {
    const Adapter &ga = local.in_adapters[static_cast<size_t>(g)], &ra = whole.in_adapters[static_cast<size_t>(g)];
    expect_near(ga.da, ra.da, "d lora A (column)");
    expect_near(ga.db, cut(ra.db, {mine}, {0, kR}), "d lora B (column)");
  }
  expect_near(local.out_adapters[0].da, cut(whole.out_adapters[0].da, {{0, kR}}, mine), "d lora A (row)");
  expect_near(local.out_adapters[0].db, whole.out_adapters[0].db, "d lora B (row)");
}

TEST(ParallelLinear, ColumnRowPairMatchesOneRankGpt2) {
  model::ModelConfig c = testing::micro_config(model::Family::GPT2);
  expect_pair_matches_one_rank(c);
}

TEST(ParallelLinear, ColumnRowPairMatchesOneRankLlama) {
  model::ModelConfig c = testing::micro_config(model::Family::Llama);
  c.num_kv_heads = 4;  // divisible by 4 ranks
  expect_pair_matches_one_rank(c);
}

}  // namespace
}  // namespace zt
