// The ZeRO engine over the mesh's groups and its gradient-reduction strategy, under mpirun
// (CTest comm.np1/np2/np4):
//   - a group per unit: some units on two half-world groups, the rest on the world; each
//     unit's reduced gradient is the sum over its own group's rows only, the partitions
//     and the step follow its group (stages 0-3), and the global norm counts each group's
//     units once per group (as experts on different expert ranks are different parameters);
//   - the norm over a mesh with tp = 2 counts a TP-replicated parameter once and a split
//     one on every tensor rank;
//   - an optimizer-owned reduction receives each unit's unreduced local gradients once per
//     step and does its own exchange, which the step then uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "comm/mpi_communicator.h"
#include "common/input_error.h"
#include "model/transformer.h"
#include "ops/elementwise.h"
#include "zero/engine.h"
#include "zero/grad_reduction.h"
#include "zero/optimizer.h"

namespace {

using namespace zt;

comm::Communicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> comm = comm::MpiCommunicator::world();
  return *comm;
}

model::ModelConfig tiny_gpt2() {
  model::ModelConfig c = model::preset_config("tiny-gpt2");
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.head_dim = 8;
  c.intermediate_size = 64;
  c.vocab_size = 70;
  c.max_position_embeddings = 16;
  c.attn_pdrop = c.resid_pdrop = c.embd_pdrop = 0.0f;
  return c;
}

constexpr int64_t kRows = 2;  // per rank and micro-batch
constexpr int64_t kSeqLen = 8;
constexpr int64_t kAccum = 2;
constexpr float kLr = 0.5f;

int32_t token(int64_t micro, int64_t row, int64_t t) {
  uint64_t h = static_cast<uint64_t>(micro * 1000003 + row * 7919 + t * 104729 + 777);
  h ^= h >> 13;
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return static_cast<int32_t>(h % 70u);
}

// Micro-batch `micro` of the given global rows.
void fill(OwnedTensor& tok, OwnedTensor& tgt, int64_t micro, const std::vector<int64_t>& rows) {
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t t = 0; t < kSeqLen; ++t) {
      tok.data<int32_t>()[static_cast<int64_t>(i) * kSeqLen + t] = token(micro, rows[i], t);
      tgt.data<int32_t>()[static_cast<int64_t>(i) * kSeqLen + t] = token(micro, rows[i], t + 1);
    }
}

// The global rows of data-parallel ranks [first, first + count).
std::vector<int64_t> rows_of(int first, int count) {
  std::vector<int64_t> rows;
  for (int64_t r = first * kRows; r < (first + count) * kRows; ++r) rows.push_back(r);
  return rows;
}

std::unique_ptr<model::Transformer> make_model(int shard_count, int stage) {
  model::ModelOptions mo;
  mo.shard_count = shard_count;
  mo.allocate_grads = stage < 2;
  mo.allocate_params = stage < 3;
  return std::make_unique<model::Transformer>(tiny_gpt2(), mo);
}

// One process, no engine: per unit, the gradient of `rows` over kAccum micro-batches with
// the loss scale `scale` (what a group's ranks sum to).
std::vector<std::vector<float>> reference_grads(int shard_count, const std::vector<int64_t>& rows, float scale) {
  const std::unique_ptr<model::Transformer> owned = make_model(shard_count, 0);
  model::Transformer& model = *owned;
  model.init_weights(11);
  const int64_t B = static_cast<int64_t>(rows.size());
  OwnedTensor tok({B, kSeqLen}, DType::I32), tgt({B, kSeqLen}, DType::I32);
  for (auto& u : model.registry().units()) u->flat_grads().zero();
  for (int64_t m = 0; m < kAccum; ++m) {
    fill(tok, tgt, m, rows);
    model.forward_backward(tok, tgt, scale);
  }
  std::vector<std::vector<float>> g;
  for (auto& u : model.registry().units()) g.push_back(u->flat_grads().to_f32_vector());
  return g;
}

std::vector<std::vector<float>> initial_params(int shard_count) {
  const std::unique_ptr<model::Transformer> owned = make_model(shard_count, 0);
  model::Transformer& model = *owned;
  model.init_weights(11);
  std::vector<std::vector<float>> p;
  for (auto& u : model.registry().units()) p.push_back(u->flat_params().to_f32_vector());
  return p;
}

double square_sum(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

// Runs kAccum micro-batches of this rank's `rows` through `engine` (loss scale `scale`).
void accumulate(model::Transformer& model, zero::ZeroEngine& engine, const std::vector<int64_t>& rows, float scale) {
  const int64_t B = static_cast<int64_t>(rows.size());
  OwnedTensor tok({B, kSeqLen}, DType::I32), tgt({B, kSeqLen}, DType::I32);
  engine.zero_grads();
  for (int64_t m = 0; m < kAccum; ++m) {
    fill(tok, tgt, m, rows);
    engine.begin_micro_batch(m == kAccum - 1);
    model.forward_backward(tok, tgt, scale);
    engine.end_micro_batch();
  }
}

void build(model::Transformer& model, zero::ZeroEngine& engine, int stage) {
  if (stage >= 3) {
    engine.shard_model_from_slices(
        [&](model::Unit& u, int64_t begin, const Tensor& out) { model.init_unit_slice(u, 11, begin, out); });
  } else {
    model.init_weights(11);
    engine.shard_model();
  }
  model.set_hooks(&engine);
}

// max |got - want[begin, begin + n)| / max |want|.
double slice_difference(const Tensor& got, const std::vector<float>& want, int64_t begin) {
  const std::vector<float> g = got.to_f32_vector();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < g.size(); ++i) {
    const double w = want[static_cast<size_t>(begin) + i];
    diff = std::max(diff, std::fabs(g[i] - w));
    scale = std::max(scale, std::fabs(w));
  }
  return diff / scale;
}

TEST(ZeroEngineGroups, UnitsOnHalfWorldGroupsReduceOverTheirGroupOnly) {
  const int W = world().size(), r = world().rank();
  if (W % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const int half = W / 2, g = r / half;  // group g holds ranks [g*half, (g+1)*half)
  std::unique_ptr<comm::Communicator> sub = world().split(g, r);
  const float scale = 1.0f / static_cast<float>(kRows * kSeqLen * kAccum * W);
  const std::vector<std::vector<float>> all = reference_grads(W, rows_of(0, W), scale);
  const std::vector<std::vector<float>> by_group[2] = {reference_grads(W, rows_of(0, half), scale),
                                                       reference_grads(W, rows_of(half, half), scale)};
  const std::vector<std::vector<float>> p0 = initial_params(W);
  const auto on_sub = [](size_t unit) { return unit % 2 == 1; };
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string what = "stage " + std::to_string(stage) + ", rank " + std::to_string(r);
    const std::unique_ptr<model::Transformer> owned = make_model(W, stage);
    model::Transformer& model = *owned;
    zero::EngineGroups groups;
    groups.norm = comm::Group(world());
    for (size_t u = 0; u < model.registry().size(); ++u)
      groups.units.push_back({on_sub(u) ? comm::Group(*sub) : comm::Group(world()), 0});
    zero::ZeroOptions zo;
    zo.stage = stage;
    zo.reduce_bucket_size = 500;  // several buckets per unit
    zo.stage3_param_persistence_threshold = 0;
    zo.overlap_comm = stage % 2 ? zero::OverlapComm::On : zero::OverlapComm::Off;
    zero::ZeroEngine engine(model.registry(), groups, zo);
    build(model, engine, stage);
    accumulate(model, engine, rows_of(r, 1), scale);

    double expected_norm2 = 0;
    for (size_t u = 0; u < model.registry().size(); ++u) {
      const std::vector<float>& want = on_sub(u) ? by_group[g][u] : all[u];
      const zero::UnitPartition p = engine.partition(u);
      EXPECT_EQ(engine.unit_group(u).size(), on_sub(u) ? half : W);
      if (stage > 0) {
        EXPECT_EQ(p.grads.numel(), model.registry().unit(u).padded_numel() / (on_sub(u) ? half : W));
      }
      EXPECT_LE(slice_difference(p.grads, want, p.begin), 1e-6) << what << ", unit " << u;
      expected_norm2 += on_sub(u) ? square_sum(by_group[0][u]) + square_sum(by_group[1][u]) : square_sum(all[u]);
    }
    EXPECT_NEAR(engine.grad_norm(), std::sqrt(expected_norm2), 1e-6 * std::sqrt(expected_norm2)) << what;

    // One SGD step: every unit's full parameters are p0 - lr * (its group's gradient).
    zero::OptimizerSpec os;
    os.type = zero::OptimizerType::SGD;
    os.lr = kLr;
    std::unique_ptr<zero::Optimizer> opt = zero::make_optimizer(model.registry(), os, engine.partition_fn());
    opt->step(kLr, 1.0f);
    engine.after_optimizer_step();
    engine.gather_full_model();
    for (size_t u = 0; u < model.registry().size(); ++u) {
      const std::vector<float>& grad = on_sub(u) ? by_group[g][u] : all[u];
      std::vector<float> want(p0[u].size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = p0[u][i] - kLr * grad[i];
      EXPECT_LE(slice_difference(model.registry().unit(u).flat_params(), want, 0), 1e-6) << what << ", unit " << u;
    }
    engine.release_full_model();
  }
}

TEST(ZeroEngineGroups, TheNormCountsTensorReplicatedParametersOnce) {
  const int W = world().size(), r = world().rank();
  if (W % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  // tp = 2 without a tensor-parallel model: both tensor ranks hold the whole model and
  // read the same rows (those of their data-parallel index), so the "split" parameters
  // count twice and the replicated ones once.
  comm::ParallelDims dims;
  dims.dp_shard = W / 2;
  dims.tp = 2;
  const comm::Mesh mesh(dims, world());
  const int dp = dims.dp();
  const float scale = 1.0f / static_cast<float>(kRows * kSeqLen * kAccum * dp);
  const std::vector<std::vector<float>> all = reference_grads(dp, rows_of(0, dp), scale);
  for (int stage = 0; stage <= 3; ++stage) {
    const std::unique_ptr<model::Transformer> owned = make_model(dp, stage);
    model::Transformer& model = *owned;
    zero::ZeroOptions zo;
    zo.stage = stage;
    zo.stage3_param_persistence_threshold = 0;
    zero::ZeroEngine engine(model.registry(), zero::dense_unit_groups(mesh, model.registry()), zo);
    EXPECT_EQ(engine.unit_group(0).size(), dp);
    build(model, engine, stage);
    accumulate(model, engine, rows_of(mesh.coords().dp, 1), scale);
    double replicated = 0, split = 0;
    for (size_t u = 0; u < model.registry().size(); ++u)
      for (const model::ParamEntry& e : model.registry().unit(u).params()) {
        const std::vector<float> part(all[u].begin() + e.offset, all[u].begin() + e.offset + e.numel());
        (e.spec.tp_split == model::TpSplit::None ? replicated : split) += square_sum(part);
      }
    ASSERT_GT(replicated, 0.0);
    ASSERT_GT(split, 0.0);
    const double want = std::sqrt(replicated + 2 * split);
    EXPECT_NEAR(engine.grad_norm(), want, 1e-6 * want) << "stage " << stage << ", rank " << r;
    EXPECT_TRUE(engine.grads_finite());
  }
}

// A stand-in for 1-bit Adam's exchange: records what it is given, then sums the
// gradients over the group itself (one all_reduce per unit, in place).
class RecordingExchange final : public zero::GradientExchange {
 public:
  struct Call {
    size_t unit;
    std::vector<float> local;
    int group_size;
  };
  std::vector<Call> calls;
  void exchange(size_t unit, const Tensor& local_grads, comm::Communicator& group) override {
    calls.push_back({unit, local_grads.to_f32_vector(), group.size()});
    group.all_reduce(local_grads, comm::ReduceOp::Sum);
  }
};

TEST(ZeroEngineGroups, AnOptimizerOwnedReductionGetsTheLocalGradientsAndDoesTheExchange) {
  const int W = world().size(), r = world().rank();
  const float scale = 1.0f / static_cast<float>(kRows * kSeqLen * kAccum * W);
  const std::vector<std::vector<float>> mine = reference_grads(W, rows_of(r, 1), scale);
  const std::vector<std::vector<float>> all = reference_grads(W, rows_of(0, W), scale);
  for (int stage = 0; stage <= 1; ++stage) {
    const std::string what = "stage " + std::to_string(stage) + ", rank " + std::to_string(r);
    const std::unique_ptr<model::Transformer> owned = make_model(W, stage);
    model::Transformer& model = *owned;
    zero::ZeroOptions zo;
    zo.stage = stage;
    RecordingExchange exchange;  // outlives the engine, which refers to it
    zero::ZeroEngine engine(model.registry(), world(), zo);
    EXPECT_EQ(engine.gradient_reduction().name(), "sum");
    engine.set_gradient_reduction(zero::make_optimizer_owned_reduction(exchange));
    EXPECT_EQ(engine.gradient_reduction().name(), "optimizer-owned");
    build(model, engine, stage);
    accumulate(model, engine, rows_of(r, 1), scale);
    // Once per unit, in the last micro-batch only, with this rank's own sum.
    ASSERT_EQ(exchange.calls.size(), model.registry().size()) << what;
    std::vector<size_t> units;
    for (const RecordingExchange::Call& c : exchange.calls) {
      units.push_back(c.unit);
      EXPECT_EQ(c.group_size, W) << what;
      EXPECT_EQ(c.local, mine[c.unit]) << what << ", unit " << c.unit;  // bitwise: no reduction touched it
    }
    std::sort(units.begin(), units.end());
    for (size_t u = 0; u < units.size(); ++u) EXPECT_EQ(units[u], u) << what;
    EXPECT_EQ(engine.comm_volume().calls, 0) << what;  // the engine moved nothing itself
    // The exchange's sums are what the optimizer steps on.
    for (size_t u = 0; u < model.registry().size(); ++u) {
      const zero::UnitPartition p = engine.partition(u);
      EXPECT_LE(slice_difference(p.grads, all[u], p.begin), 1e-6) << what << ", unit " << u;
    }
  }
  // Stages 2-3 free a unit's full gradients after its reduction: refused up front.
  const std::unique_ptr<model::Transformer> model = make_model(W, 2);
  zero::ZeroOptions zo;
  zo.stage = 2;
  RecordingExchange exchange;
  zero::ZeroEngine engine(model->registry(), world(), zo);
  const std::string e = zt::testing::input_error_of(
      [&] { engine.set_gradient_reduction(zero::make_optimizer_owned_reduction(exchange)); });
  EXPECT_NE(e.find("stage 0 or 1, not 2"), std::string::npos) << e;
}

TEST(ZeroEngineGroups, TheSumStrategyNamesItsWireDtype) {
  EXPECT_EQ(zero::make_sum_reduction()->name(), "sum");
  EXPECT_EQ(zero::make_sum_reduction(DType::BF16)->name(), "sum in bf16");
}

}  // namespace
