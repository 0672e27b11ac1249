// pipeline::Executor (pipeline/executor.h) over two ranks: stage 0 (the embedding and the
// first two blocks) on one, stage 1 (the last two blocks, head and loss) on the other,
// activations and their gradients sent and received over the pipeline group, as GPipe and
// 1F1B schedule them (three micro-batches in flight). The last stage's losses and each
// stage's unit gradients are the one-process model's, bit for bit (every unit lives on
// one stage; its gradients accumulate in micro-batch order either way). With 4 ranks two
// such pipelines run side by side (the world split in pairs); with 1 the test skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "common/small_models.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"

namespace {

using namespace zt;

comm::Communicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> comm = comm::MpiCommunicator::world();
  return *comm;
}

constexpr int64_t kB = 2, kT = 6;
constexpr int kMicroBatches = 3;

struct Batches {
  std::vector<std::vector<int32_t>> tokens, targets;
  explicit Batches(int64_t V) {
    for (int m = 0; m < kMicroBatches; ++m) {
      Philox rng(static_cast<uint64_t>(m) + 21, 3);
      tokens.emplace_back(static_cast<size_t>(kB * kT));
      targets.emplace_back(tokens.back().size());
      for (size_t i = 0; i < tokens.back().size(); ++i) {
        tokens.back()[i] = static_cast<int32_t>(rng.block(i)[0] % V);
        targets.back()[i] = static_cast<int32_t>(rng.block(i)[1] % V);
      }
    }
  }
  pipeline::MicroBatchData at(int m) {
    return {Tensor(tokens[m].data(), {kB, kT}, DType::I32), Tensor(targets[m].data(), {kB, kT}, DType::I32), Tensor()};
  }
};

struct Driver : pipeline::StepDriver {
  model::ModelStage& stage;
  Batches& batches;
  std::vector<double> losses;
  Driver(model::ModelStage& s, Batches& b) : stage(s), batches(b) {}
  pipeline::MicroBatchData load(int m) override { return batches.at(m); }
  void begin_micro_batch(int m, pipeline::Boundary) override { stage.set_dropout_seed(9, static_cast<uint64_t>(m)); }
  void end_micro_batch(int) override {}
  float grad_scale(int) override { return 0.25f; }
  void loss(int, const ops::CrossEntropyResult& r) override { losses.push_back(r.loss_sum); }
  void reduce_grads() override {}
  void optimizer_step() override {}
};

std::vector<char> bytes_of(const Tensor& t) {
  const char* p = static_cast<const char*>(t.data());
  return {p, p + t.nbytes()};
}

}  // namespace

TEST(PipelineExecutorMultirank, TwoStagesOverThePipelineGroupGiveTheOneProcessNumbers) {
  comm::Communicator& w = world();
  if (w.size() < 2 || w.size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  std::unique_ptr<comm::Communicator> group = w.split(w.rank() / 2, w.rank() % 2);
  const int stage_index = group->rank();
  model::ModelConfig c = zt::testing::micro_config(model::Family::Llama);
  c.num_layers = 4;
  c.tie_word_embeddings = false;  // every unit on one stage
  Batches batches(c.vocab_size);

  model::Transformer whole(c, model::ModelOptions());
  whole.init_weights(4);
  whole.zero_grads();
  std::vector<double> expected;
  for (int m = 0; m < kMicroBatches; ++m) {
    whole.set_dropout_seed(9, static_cast<uint64_t>(m));
    const pipeline::MicroBatchData d = batches.at(m);
    expected.push_back(whole.forward_backward(d.tokens, d.targets, 0.25f).loss_sum);
  }

  for (const pipeline::Schedule& schedule :
       {pipeline::gpipe_schedule(2, kMicroBatches), pipeline::one_f_one_b_schedule(2, kMicroBatches)}) {
    SCOPED_TRACE(schedule.name() + ", stage " + std::to_string(stage_index));
    model::Transformer model(c, model::ModelOptions());
    model.init_weights(4);
    model.zero_grads();
    const model::StageSpec spec =
        stage_index == 0 ? model::StageSpec{0, 2, schedule.slots(0)} : model::StageSpec{2, 4, schedule.slots(1)};
    model::ModelStage stage(model.config(), model.options(), model.registry(), spec);
    Driver driver(stage, batches);
    pipeline::Executor(stage, group.get(), driver, {kB, kT, c.hidden_size}).run(schedule, stage_index);

    if (stage_index == 1) {
      ASSERT_EQ(driver.losses.size(), static_cast<size_t>(kMicroBatches));
      for (int m = 0; m < kMicroBatches; ++m)
        EXPECT_EQ(std::memcmp(&driver.losses[m], &expected[m], sizeof(double)), 0) << "micro-batch " << m;
    }
    // The units of this stage: the embedding and blocks 0-1, or blocks 2-3 and the head.
    const std::vector<std::string> mine = stage_index == 0 ? std::vector<std::string>{"embed", "block.0", "block.1"}
                                                           : std::vector<std::string>{"block.2", "block.3", "head"};
    int compared = 0;
    for (size_t i = 0; i < model.registry().size(); ++i) {
      const model::Unit& u = model.registry().unit(i);
      if (std::find(mine.begin(), mine.end(), u.name()) == mine.end()) continue;
      ++compared;
      EXPECT_TRUE(bytes_of(u.flat_grads()) == bytes_of(whole.registry().unit(i).flat_grads())) << u.name();
    }
    EXPECT_EQ(compared, 3);
  }
}
