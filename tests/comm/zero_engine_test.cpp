// The ZeRO engine under mpirun at 1, 2 and 4 ranks (CTest dist.np1/np2/np4).
//
// Equivalence: for stages 0-3 x gradient accumulation 1 and 3, five SGD steps (momentum,
// weight decay, global-norm clipping) on N ranks, each taking its slice of the global
// batch, leave the same parameters as one process that takes the whole global batch —
// within 1e-6 of the largest value in f32, and within 2e-2 with bf16 storage (bf16
// gradients are rounded per rank before the sum, parameters after every step). SGD is
// linear in the gradients, so this measures the engine; Adam divides by sqrt(v), which
// turns the last-bit differences of a reordered sum into O(lr) differences for elements
// whose gradient is ~0 — its runs are checked at 2e-4 (5 steps of lr 1e-2). Also: model-state bytes per rank follow the ZeRO formulas exactly, and the
// bytes communicated per step are stage 0's for stages 1-2 and at most 1.5x for stage 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/small_models.h"
#include "common/temp_dir.h"
#include "comm/mpi_communicator.h"
#include "comm/single.h"
#include "model/transformer.h"
#include "ops/elementwise.h"
#include "zero/engine.h"
#include "zero/offload_optimizer.h"
#include "zero/optimizer.h"

namespace {

using namespace zt;

comm::Communicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> comm = comm::MpiCommunicator::world();
  return *comm;
}

model::ModelConfig gpt2_config() {
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

model::ModelConfig llama_config() {
  model::ModelConfig c = zt::testing::small_llama_config();
  c.tie_word_embeddings = false;
  c.max_position_embeddings = 16;
  return c;
}

struct RunSpec {
  model::ModelConfig config = gpt2_config();
  int stage = 0;
  int64_t grad_accum = 1;
  DType dtype = DType::F32;
  int64_t persistence_threshold = 0;  // stage 3: shard every unit
  int64_t reduce_bucket_size = 500;   // small: several buckets per unit
  int steps = 5;
  zero::OptimizerType optimizer = zero::OptimizerType::AdamW;
  std::optional<DType> comm_dtype;  // communication_data_type (default: the gradients')
  std::optional<double> offload_ratio;  // ZeRO-Offload with this ratio (host staging on the CPU)
  bool offload_params = false;          // stage 3: the partitions in the engine's host store
  std::string param_nvme_path;          // with offload_params: the slices past 2000 elements swapped here
  model::LoraOptions lora;              // LoRA: a frozen base and adapter units
};

constexpr int64_t kMicroBatch = 2;  // per rank
constexpr int64_t kSeqLen = 8;

// Token t of global row `row` in micro-batch `micro`: the same for every world size.
int32_t token(int64_t micro, int64_t row, int64_t t, int64_t vocab) {
  uint64_t h = static_cast<uint64_t>(micro * 1000003 + row * 7919 + t * 104729 + 12345);
  h ^= h >> 13;
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
}

struct RunResult {
  std::vector<std::vector<float>> params;  // per unit, the real elements
  zero::ModelStateBytes memory;
  zero::CommVolume volume_last_step;
  int64_t numel_padded = 0;
  std::vector<std::pair<std::string, std::vector<float>>> state;  // optimizer state by name@begin, sorted
};

// Trains spec.steps steps on `comm`; micro-batch rows [rank*B, (rank+1)*B) of a global
// batch of B*size rows, where B = micro_batch_per_rank.
RunResult train(comm::Communicator& comm, const RunSpec& spec, int64_t micro_batch_per_rank) {
  const int W = comm.size(), r = comm.rank();
  model::ModelOptions mo;
  mo.param_dtype = mo.grad_dtype = spec.dtype;
  mo.shard_count = W;
  mo.allocate_grads = spec.stage < 2;
  mo.allocate_params = spec.stage < 3;
  mo.lora = spec.lora;
  model::Transformer model(spec.config, mo);
  zero::ZeroOptions zo;
  zo.stage = spec.stage;
  zo.overlap_comm = spec.stage % 2 == 1 ? zero::OverlapComm::Off : zero::OverlapComm::On;
  zo.reduce_bucket_size = spec.reduce_bucket_size;
  zo.stage3_param_persistence_threshold = spec.persistence_threshold;
  zo.stage3_prefetch_bucket_size = 5000;
  zo.communication_dtype = spec.comm_dtype;
  if (spec.offload_params) zo.param_home = zero::ParamHome::PageableHost;
  if (!spec.param_nvme_path.empty()) {
    zero::ParamNvme n;
    n.nvme_path = spec.param_nvme_path;
    n.buffer_count = 2;  // fewer than the swapped units: every use swaps
    n.max_in_cpu = 2000;
    n.aio.block_size = 16 << 10;
    zo.param_nvme = n;
  }
  zero::ZeroEngine engine(model.registry(), comm, zo);
  if (spec.stage >= 3) {
    engine.shard_model_from_slices(
        [&](model::Unit& u, int64_t begin, const Tensor& out) { model.init_unit_slice(u, 11, begin, out); });
  } else {
    model.init_weights(11);
    engine.shard_model();
  }
  model.set_hooks(&engine);
  zero::OptimizerSpec os;
  os.type = spec.optimizer;
  os.lr = spec.optimizer == zero::OptimizerType::SGD ? 0.5f : 1e-2f;
  os.momentum = 0.9f;
  os.weight_decay = 0.1f;
  std::unique_ptr<zero::Optimizer> optimizer;
  if (spec.offload_ratio) {
    zero::OffloadOptions oo;
    oo.ratio = *spec.offload_ratio;
    auto offload = std::make_unique<zero::OffloadedOptimizer>(model.registry(), os, engine.partition_fn(), oo);
    engine.set_offload(offload.get());
    optimizer = std::move(offload);
  } else {
    optimizer = zero::make_optimizer(model.registry(), os, engine.partition_fn());
  }

  const int64_t B = micro_batch_per_rank, T = kSeqLen, V = spec.config.vocab_size;
  OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
  RunResult out;
  for (int step = 0; step < spec.steps; ++step) {
    engine.reset_comm_volume();
    engine.zero_grads();
    for (int64_t m = 0; m < spec.grad_accum; ++m) {
      const int64_t micro = step * spec.grad_accum + m;
      for (int64_t i = 0; i < B; ++i)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t row = r * B + i;
          tok.data<int32_t>()[i * T + t] = token(micro, row, t, V);
          tgt.data<int32_t>()[i * T + t] = token(micro, row, t + 1, V);
        }
      engine.begin_micro_batch(m == spec.grad_accum - 1);
      model.forward_backward(tok, tgt, 1.0f / static_cast<float>(B * T * spec.grad_accum * W));
      engine.end_micro_batch();
    }
    const double norm = engine.grad_norm();
    const float clip = norm > 0.5 ? static_cast<float>(0.5 / (norm + 1e-6)) : 1.0f;  // exercise the global norm
    optimizer->step(os.lr, clip);
    engine.after_optimizer_step();
    out.volume_last_step = engine.comm_volume();
  }
  out.memory = engine.memory(static_cast<int64_t>(optimizer->state_bytes()));
  engine.gather_full_model();
  for (auto& u : model.registry().units()) {
    out.params.push_back(u->flat_params().narrow(0, 0, u->numel()).to_f32_vector());
    out.numel_padded += u->padded_numel();
  }
  engine.release_full_model();
  for (const zero::StateSlice& st : optimizer->state_slices())
    out.state.emplace_back(st.name + "@" + std::to_string(st.begin), st.data.to_f32_vector());
  std::sort(out.state.begin(), out.state.end());
  engine.set_offload(nullptr);
  return out;
}

// One process at stage 0 (nothing sharded) taking the whole global batch.
RunResult reference(RunSpec spec) {
  spec.stage = 0;
  comm::SingleCommunicator one;
  return train(one, spec, kMicroBatch * world().size());
}

// max |a - b| / max |b| over one unit.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

void expect_same_parameters(const RunResult& got, const RunResult& want, double tolerance, const char* what) {
  ASSERT_EQ(got.params.size(), want.params.size());
  double worst = 0;
  for (size_t u = 0; u < got.params.size(); ++u) {
    const double d = relative_difference(got.params[u], want.params[u]);
    worst = std::max(worst, d);
    EXPECT_LE(d, tolerance) << what << ", unit " << u << ", rank " << world().rank() << " of " << world().size();
  }
  if (world().rank() == 0)
    std::printf("[zero-equivalence] %-34s world %d: max rel diff %.2e (tolerance %.0e)\n", what, world().size(), worst,
                tolerance);
}

struct MatrixCase {
  int stage;
  int64_t grad_accum;
};

class ZeroEquivalence : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(ZeroEquivalence, F32ParametersMatchOneProcess) {
  RunSpec spec;
  spec.stage = GetParam().stage;
  spec.grad_accum = GetParam().grad_accum;
  spec.optimizer = zero::OptimizerType::SGD;
  const RunResult want = reference(spec);
  const RunResult got = train(world(), spec, kMicroBatch);
  char what[64];
  std::snprintf(what, sizeof what, "gpt2 f32 sgd stage %d gas %lld", spec.stage,
                static_cast<long long>(spec.grad_accum));
  expect_same_parameters(got, want, 1e-6, what);
}

TEST_P(ZeroEquivalence, Bf16ParametersMatchOneProcess) {
  RunSpec spec;
  spec.stage = GetParam().stage;
  spec.grad_accum = GetParam().grad_accum;
  spec.dtype = DType::BF16;
  spec.optimizer = zero::OptimizerType::SGD;
  const RunResult want = reference(spec);
  const RunResult got = train(world(), spec, kMicroBatch);
  char what[64];
  std::snprintf(what, sizeof what, "gpt2 bf16 sgd stage %d gas %lld", spec.stage,
                static_cast<long long>(spec.grad_accum));
  expect_same_parameters(got, want, 2e-2, what);
}

TEST_P(ZeroEquivalence, AdamWF32ParametersMatchOneProcess) {
  RunSpec spec;
  spec.stage = GetParam().stage;
  spec.grad_accum = GetParam().grad_accum;
  if (spec.stage % 3 != 0) GTEST_SKIP() << "AdamW: stages 0 and 3 (the SGD runs cover every stage)";
  const RunResult want = reference(spec);
  const RunResult got = train(world(), spec, kMicroBatch);
  char what[64];
  std::snprintf(what, sizeof what, "gpt2 f32 adamw stage %d gas %lld", spec.stage,
                static_cast<long long>(spec.grad_accum));
  expect_same_parameters(got, want, 2e-4, what);
}

INSTANTIATE_TEST_SUITE_P(StagesAndAccumulation, ZeroEquivalence,
                         ::testing::Values(MatrixCase{0, 1}, MatrixCase{0, 3}, MatrixCase{1, 1}, MatrixCase{1, 3},
                                           MatrixCase{2, 1}, MatrixCase{2, 3}, MatrixCase{3, 1}, MatrixCase{3, 3}),
                         [](const ::testing::TestParamInfo<MatrixCase>& i) {
                           return "stage" + std::to_string(i.param.stage) + "_gas" + std::to_string(i.param.grad_accum);
                         });

// LoRA (issue 20): the frozen base has no gradients to reduce and no state; the adapters
// train the same at every stage as in one process, and the base stays bitwise.
TEST(ZeroEngine, LoraAdaptersMatchOneProcessAndTheBaseStaysFrozen) {
  for (int stage : {0, 1, 2, 3}) {
    RunSpec spec;
    spec.config = llama_config();
    spec.stage = stage;
    spec.grad_accum = 2;
    spec.optimizer = zero::OptimizerType::SGD;
    spec.lora.r = 4;
    spec.lora.scaling = 2.0f;
    spec.lora.target_modules = {"q_proj", "v_proj", "down_proj"};
    RunSpec frozen_only = spec;
    frozen_only.steps = 0;
    const RunResult initial = reference(frozen_only);
    const RunResult want = reference(spec);
    const RunResult got = train(world(), spec, kMicroBatch);
    char what[64];
    std::snprintf(what, sizeof what, "llama lora sgd stage %d gas 2", stage);
    expect_same_parameters(got, want, 1e-6, what);
    // Units 0 .. L+1 are the base (embed, blocks, head): unchanged, bit for bit.
    const size_t base_units = static_cast<size_t>(spec.config.num_layers) + 2;
    for (size_t u = 0; u < base_units; ++u) EXPECT_EQ(got.params[u], initial.params[u]) << "base unit " << u;
    bool trained = false;
    for (size_t u = base_units; u < got.params.size(); ++u) trained = trained || got.params[u] != initial.params[u];
    EXPECT_TRUE(trained);
    // Memory: gradients and optimizer state for the adapters only.
    int64_t adapter_padded = 0;
    {
      model::ModelOptions mo;
      mo.shard_count = world().size();
      mo.lora = spec.lora;
      model::Transformer m(spec.config, mo);
      for (auto& u : m.registry().units())
        if (!u->frozen()) adapter_padded += u->padded_numel();
    }
    const int W = world().size();
    const int64_t grads = stage >= 2 ? adapter_padded / W * 4 : adapter_padded * 4;
    EXPECT_EQ(got.memory.grads, grads) << "stage " << stage;
    // SGD with momentum: one f32 buffer per owned adapter element.
    EXPECT_EQ(got.memory.optimizer, stage >= 1 ? adapter_padded / W * 4 : adapter_padded * 4) << "stage " << stage;
  }
}

TEST(ZeroEngine, UntiedLlamaWithPersistentUnitsMatchesOneProcess) {
  // Stage 3 with every unit persistent (never released): the updated slices must still
  // reach the gathered copies after each step, on any number of ranks.
  {
    RunSpec spec;
    spec.config = llama_config();
    spec.stage = 3;
    spec.optimizer = zero::OptimizerType::SGD;
    spec.persistence_threshold = int64_t{1} << 40;
    const RunResult want = reference(spec);
    const RunResult got = train(world(), spec, kMicroBatch);
    expect_same_parameters(got, want, 1e-6, "llama f32 stage 3 all persistent");
  }
  for (int stage : {2, 3}) {
    RunSpec spec;
    spec.config = llama_config();
    spec.stage = stage;
    spec.grad_accum = 3;
    spec.optimizer = zero::OptimizerType::SGD;
    spec.persistence_threshold = 3000;  // the head and norms stay gathered, blocks do not
    spec.reduce_bucket_size = 1 << 20;  // one bucket per unit
    const RunResult want = reference(spec);
    const RunResult got = train(world(), spec, kMicroBatch);
    expect_same_parameters(got, want, 1e-6, stage == 2 ? "llama f32 stage 2 gas 3" : "llama f32 stage 3 gas 3 persist");
  }
}

TEST(ZeroEngine, ModelStateBytesFollowTheZeroFormulas) {
  const int W = world().size();
  if (world().rank() == 0)
    std::printf(
        "[zero-memory] world %d, bf16 params/grads, AdamW (f32 master + 2 moments = 12 B/param)\n"
        "[zero-memory] stage | params B | grads B | optimizer B | total B | formula B | paper 2+2+12 B\n",
        W);
  for (int stage = 0; stage <= 3; ++stage) {
    RunSpec spec;
    spec.stage = stage;
    spec.dtype = DType::BF16;
    spec.steps = 1;
    const RunResult got = train(world(), spec, kMicroBatch);
    const int64_t n = got.numel_padded;
    // Gradient partitions of stages 2-3 are f32 (accumulation across micro-batches).
    const int64_t formula = zero::zero_formula_bytes(stage, n, W, 2, 2, 4, 12);
    const int64_t paper = zero::zero_formula_bytes(stage, n, W, 2, 2, 2, 12);
    EXPECT_EQ(got.memory.model_states(), formula) << "stage " << stage;
    EXPECT_EQ(got.memory.optimizer, stage >= 1 ? n * 12 / W : n * 12) << "stage " << stage;
    if (world().rank() == 0)
      std::printf("[zero-memory] %5d | %8lld | %7lld | %11lld | %7lld | %9lld | %lld\n", stage,
                  static_cast<long long>(got.memory.params), static_cast<long long>(got.memory.grads),
                  static_cast<long long>(got.memory.optimizer), static_cast<long long>(got.memory.model_states()),
                  static_cast<long long>(formula), static_cast<long long>(paper));
  }
}

TEST(ZeroEngine, BytesCommunicatedPerStepMatchTheory) {
  const int W = world().size();
  double volume[4] = {};
  for (int stage = 0; stage <= 3; ++stage) {
    RunSpec spec;
    spec.stage = stage;
    spec.steps = 2;
    spec.reduce_bucket_size = 1 << 20;
    volume[stage] = train(world(), spec, kMicroBatch).volume_last_step.total();
  }
  if (world().rank() == 0)
    std::printf("[zero-comm] world %d bytes/step: stage0 %.0f stage1 %.0f stage2 %.0f stage3 %.0f (x%.3f of stage 0)\n",
                W, volume[0], volume[1], volume[2], volume[3], W > 1 ? volume[3] / volume[0] : 0.0);
  if (W == 1) {
    for (double v : volume) EXPECT_EQ(v, 0.0);
    return;
  }
  EXPECT_DOUBLE_EQ(volume[1], volume[0]);
  EXPECT_DOUBLE_EQ(volume[2], volume[0]);
  // Stage 3: gathers for forward and backward plus the reduce-scatter = 1.5x; the tied
  // embedding stays gathered from its forward to its backward, saving one gather.
  EXPECT_LE(volume[3], 1.5 * volume[0] + 1);
  EXPECT_GE(volume[3], 1.25 * volume[0]);
}

// communication_data_type bf16/fp16 with f32 gradients: every stage's gradient
// reductions move half the bytes of fp32 ones, and the result stays within 16-bit
// rounding of the f32 reduction (one rounding of each rank's bucket and of the sum).
TEST(ZeroEngine, SixteenBitCommunicationHalvesTheReductionBytes) {
  const int W = world().size();
  for (int stage = 0; stage <= 3; ++stage) {
    RunSpec spec;
    spec.stage = stage;
    spec.steps = 2;
    spec.optimizer = zero::OptimizerType::SGD;
    const RunResult f32 = train(world(), spec, kMicroBatch);
    const double f32_bytes = f32.volume_last_step.all_reduce + f32.volume_last_step.reduce_scatter;
    for (DType cd : {DType::BF16, DType::F16}) {
      spec.comm_dtype = cd;
      const RunResult got = train(world(), spec, kMicroBatch);
      const double bytes = got.volume_last_step.all_reduce + got.volume_last_step.reduce_scatter;
      char what[64];
      std::snprintf(what, sizeof what, "stage %d communication %s", stage, dtype_name(cd));
      if (W == 1) {
        // Nothing moves, so nothing is rounded: the f32 run exactly.
        EXPECT_EQ(bytes, 0.0) << what;
        expect_same_parameters(got, f32, 0.0, what);
        continue;
      }
      EXPECT_DOUBLE_EQ(bytes, 0.5 * f32_bytes) << what;
      // Stage 3's parameter gathers stay in the parameters' dtype.
      EXPECT_DOUBLE_EQ(got.volume_last_step.all_gather, f32.volume_last_step.all_gather) << what;
      expect_same_parameters(got, f32, cd == DType::BF16 ? 6e-3 : 6e-4, what);
    }
  }
}

}  // namespace

namespace {

// An overflow on one rank's gradient slice is seen by every rank (so all skip the step),
// and the global norm is the same on every rank and equals the per-unit host sum of
// squares (summed over ranks) bit for bit.
// The offload seam: gradient_ready fires once per unit per step, during the last
// micro-batch only, in backward order (the head's unit first), with the partition's final
// values: what it saw then equals what the optimizer reads at the boundary.
TEST(ZeroEngine, GradientReadyFiresOncePerUnitWithTheFinalPartition) {
  comm::Communicator& comm = world();
  const int64_t gas = 3;
  for (int stage = 0; stage <= 3; ++stage)
    for (const zero::OverlapComm overlap : {zero::OverlapComm::On, zero::OverlapComm::Off}) {
      const std::string what = "stage " + std::to_string(stage) +
                               (overlap == zero::OverlapComm::On ? ", overlap" : ", no overlap") + ", rank " +
                               std::to_string(comm.rank()) + " of " + std::to_string(comm.size());
      model::ModelOptions mo;
      mo.shard_count = comm.size();
      mo.allocate_grads = stage < 2;
      model::Transformer model(gpt2_config(), mo);
      model.init_weights(5);
      zero::ZeroOptions zo;
      zo.stage = stage;
      zo.overlap_comm = overlap;
      zo.reduce_bucket_size = 500;
      zero::ZeroEngine engine(model.registry(), comm, zo);
      engine.shard_model();
      model.set_hooks(&engine);
      struct Fired {
        size_t unit;
        int64_t micro;
        std::vector<float> values;
        const void* data;
      };
      std::vector<Fired> fired;
      int64_t micro = 0;
      struct Recorder final : zero::OffloadHooks {
        std::function<void(size_t, const Tensor&)> ready;
        void gradient_ready(size_t unit, const Tensor& grads) override { ready(unit, grads); }
        void before_gradients_reset() override {}
        void before_params_used(size_t) override {}
        void params_loaded() override {}
      } recorder;
      recorder.ready = [&](size_t unit, const Tensor& grads) {
        fired.push_back({unit, micro, grads.to_f32_vector(), grads.data()});
      };
      engine.set_offload(&recorder);
      OwnedTensor tok({kMicroBatch, kSeqLen}, DType::I32), tgt({kMicroBatch, kSeqLen}, DType::I32);
      for (int step = 0; step < 2; ++step) {
        fired.clear();
        engine.zero_grads();
        for (micro = 0; micro < gas; ++micro) {
          for (int64_t i = 0; i < tok->numel(); ++i) {
            tok.data<int32_t>()[i] = token(step * gas + micro, comm.rank() * 97 + i / kSeqLen, i % kSeqLen, 70);
            tgt.data<int32_t>()[i] = token(step * gas + micro, comm.rank() * 97 + i / kSeqLen, i % kSeqLen + 1, 70);
          }
          engine.begin_micro_batch(micro == gas - 1);
          model.forward_backward(tok, tgt, 1.0f / static_cast<float>(gas * comm.size()));
          engine.end_micro_batch();
        }
        const size_t units = model.registry().size();
        ASSERT_EQ(fired.size(), units) << what;
        for (size_t k = 0; k < fired.size(); ++k) {
          EXPECT_EQ(fired[k].unit, units - 1 - k) << what << ": backward order";
          EXPECT_EQ(fired[k].micro, gas - 1) << what << ": only in the last micro-batch";
          const zero::UnitPartition p = engine.partition(fired[k].unit);
          EXPECT_EQ(fired[k].data, p.grads.data()) << what;
          EXPECT_EQ(fired[k].values, p.grads.to_f32_vector()) << what << ", unit " << fired[k].unit;
        }
        engine.after_optimizer_step();
      }
    }
}

TEST(ZeroEngine, OverflowOnOneRankIsAgreedByAllAndTheNormIsGlobal) {
  comm::Communicator& comm = world();
  for (int stage = 0; stage <= 3; ++stage) {
    model::ModelOptions mo;
    mo.param_dtype = mo.grad_dtype = DType::F16;
    mo.shard_count = comm.size();
    mo.allocate_grads = stage < 2;
    model::Transformer model(gpt2_config(), mo);
    model.init_weights(3);
    zero::ZeroOptions zo;
    zo.stage = stage;
    zero::ZeroEngine engine(model.registry(), comm, zo);
    engine.shard_model();
    model.set_hooks(&engine);
    OwnedTensor tok({kMicroBatch, kSeqLen}, DType::I32), tgt({kMicroBatch, kSeqLen}, DType::I32);
    for (int64_t i = 0; i < tok->numel(); ++i) {
      tok.data<int32_t>()[i] = token(comm.rank(), i / kSeqLen, i % kSeqLen, 70);
      tgt.data<int32_t>()[i] = token(comm.rank(), i / kSeqLen, i % kSeqLen + 1, 70);
    }
    engine.zero_grads();
    engine.begin_micro_batch(true);
    model.forward_backward(tok, tgt, 1.0f);
    engine.end_micro_batch();
    EXPECT_TRUE(engine.grads_finite()) << "stage " << stage;
    // Every rank holds the same norm (one all-reduce of the partial sums).
    OwnedTensor norm({1}, DType::F32), max_norm({1}, DType::F32);
    norm.data<float>()[0] = max_norm.data<float>()[0] = static_cast<float>(engine.grad_norm());
    comm.all_reduce(max_norm, comm::ReduceOp::Max);
    EXPECT_EQ(norm.data<float>()[0], max_norm.data<float>()[0]) << "stage " << stage;
    // The device-accumulated norm is the per-unit host sum it replaced, bit for bit.
    double local = 0.0;
    for (size_t u = 0; u < model.registry().size(); ++u) {
      const zero::UnitPartition p = engine.partition(u);
      if (p.grads.data()) local += ops::sum_of_squares(p.grads);
    }
    const double global = stage >= 1 ? comm::sum_over_ranks(comm, local) : local;
    EXPECT_EQ(engine.grad_norm(), std::sqrt(global)) << "stage " << stage;
    EXPECT_TRUE(engine.grads_finite()) << "stage " << stage << " (asked again)";
    if (comm.rank() == comm.size() - 1) engine.partition(1).grads.set_f32(0, INFINITY);
    EXPECT_FALSE(engine.grads_finite()) << "stage " << stage << ", rank " << comm.rank();
    // Stage 0's norm is each rank's own (it holds the whole reduced gradient); stages 1-3
    // sum the ranks' slices, so every rank sees the inf.
    const bool sees_inf = stage >= 1 || comm.rank() == comm.size() - 1;
    EXPECT_EQ(std::isfinite(engine.grad_norm()), !sees_inf) << "stage " << stage << ", rank " << comm.rank();
    // A nan in another unit on the first rank only (the inf stays on the last).
    if (comm.rank() == 0) engine.partition(0).grads.set_f32(1, NAN);
    EXPECT_FALSE(engine.grads_finite()) << "stage " << stage << ", rank " << comm.rank();
    if (comm.rank() == comm.size() - 1) engine.partition(1).grads.set_f32(0, 0.0f);
    EXPECT_FALSE(engine.grads_finite()) << "stage " << stage << ", rank " << comm.rank() << " (nan only)";
  }
}

// ZeRO-Offload with host staging (the CPU backend): the optimizer state and step on the
// host worker, each unit's gradients copied out as the backward finishes it and its
// parameters copied back before the next use, gives bitwise the parameters and the
// optimizer state of the same run without offload, at every stage and rank count, with
// every unit on the host (ratio 1) or the first half of the elements kept on the device's
// optimizer (ratio 0.5).
TEST(ZeroOffload, HostStepIsBitwiseTheDeviceStepAtEveryStage) {
  comm::Communicator& comm = world();
  for (int stage = 1; stage <= 3; ++stage)
    for (const DType dtype : {DType::F32, DType::BF16})
      for (const double ratio : {1.0, 0.5}) {
        RunSpec spec;
        spec.stage = stage;
        spec.dtype = dtype;
        spec.grad_accum = 2;
        spec.steps = 3;
        spec.persistence_threshold = 2000;  // stage 3: some units persistent, some gathered
        const RunResult plain = train(comm, spec, kMicroBatch);
        spec.offload_ratio = ratio;
        const RunResult offloaded = train(comm, spec, kMicroBatch);
        const std::string what = "stage " + std::to_string(stage) + ", " + dtype_name(dtype) + ", ratio " +
                                 std::to_string(ratio) + ", rank " + std::to_string(comm.rank()) + " of " +
                                 std::to_string(comm.size());
        ASSERT_EQ(offloaded.params.size(), plain.params.size()) << what;
        for (size_t u = 0; u < plain.params.size(); ++u)
          EXPECT_EQ(offloaded.params[u], plain.params[u]) << what << ", unit " << u;
        ASSERT_EQ(offloaded.state.size(), plain.state.size()) << what;
        for (size_t i = 0; i < plain.state.size(); ++i) {
          EXPECT_EQ(offloaded.state[i].first, plain.state[i].first) << what;
          EXPECT_EQ(offloaded.state[i].second, plain.state[i].second) << what << ", " << plain.state[i].first;
        }
      }
}

// offload_param: stage 3's partitions live in the engine's host store; each gather copies
// the slice to a device buffer first (on the CPU a second host buffer: the same steps)
// and the host optimizer updates the store in place. Bitwise the plain stage-3 run, and
// the partitions leave the device's model-state count. With offload_param nvme (each rank
// its own swap file; the first units within max_in_cpu resident, the rest through two
// buffers) the same bits.
TEST(ZeroOffload, ParameterPartitionsInHostMemoryTrainBitwise) {
  comm::Communicator& comm = world();
  zt::testing::TempDir swap(zt::testing::swap_temp_path("zero_param_nvme_"));
  for (const DType dtype : {DType::F32, DType::BF16})
    for (const int64_t accum : {1, 2}) {
      RunSpec spec;
      spec.stage = 3;
      spec.dtype = dtype;
      spec.grad_accum = accum;
      spec.steps = 3;
      spec.persistence_threshold = 2000;  // some units persistent (gathered after each step), some not
      spec.offload_ratio = 1.0;
      const RunResult plain = train(comm, spec, kMicroBatch);
      spec.offload_params = true;
      const RunResult offloaded = train(comm, spec, kMicroBatch);
      const std::string what = std::string(dtype_name(dtype)) + ", accumulation " + std::to_string(accum) +
                               ", rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size());
      ASSERT_EQ(offloaded.params.size(), plain.params.size()) << what;
      for (size_t u = 0; u < plain.params.size(); ++u)
        EXPECT_EQ(offloaded.params[u], plain.params[u]) << what << ", unit " << u;
      EXPECT_EQ(offloaded.state, plain.state) << what;
      const int64_t slices = plain.numel_padded / comm.size() * static_cast<int64_t>(dtype_size(dtype));
      EXPECT_EQ(plain.memory.params - offloaded.memory.params, slices) << what;
      spec.param_nvme_path = swap.path().string();
      const RunResult swapped = train(comm, spec, kMicroBatch);
      spec.param_nvme_path.clear();
      for (size_t u = 0; u < plain.params.size(); ++u)
        EXPECT_EQ(swapped.params[u], plain.params[u]) << what << ", nvme, unit " << u;
      EXPECT_EQ(swapped.state, plain.state) << what << ", nvme";
      EXPECT_EQ(swapped.memory.params, offloaded.memory.params) << what;
      EXPECT_TRUE(std::filesystem::is_empty(swap.path())) << "the swap folder goes with the engine";
    }
}

// SGD with momentum and Lion take the same path.
TEST(ZeroOffload, EveryOptimizerTypeSteps) {
  comm::Communicator& comm = world();
  for (const zero::OptimizerType type : {zero::OptimizerType::SGD, zero::OptimizerType::Lion, zero::OptimizerType::Adam}) {
    RunSpec spec;
    spec.stage = 2;
    spec.optimizer = type;
    spec.steps = 3;
    const RunResult plain = train(comm, spec, kMicroBatch);
    spec.offload_ratio = 1.0;
    const RunResult offloaded = train(comm, spec, kMicroBatch);
    for (size_t u = 0; u < plain.params.size(); ++u)
      EXPECT_EQ(offloaded.params[u], plain.params[u]) << zero::optimizer_type_name(type) << ", unit " << u;
    EXPECT_EQ(offloaded.state, plain.state) << zero::optimizer_type_name(type);
  }
}

}  // namespace

