// pipeline::Executor (pipeline/executor.h) on one stage: the data-parallel schedule is the
// loop of Transformer::forward_backward calls, bit for bit (losses and gradients), and so
// are one-stage GPipe (every forward, then every backward, one slot per micro-batch) and
// 1F1B; the driver sees each micro-batch begin before its first instruction (the last one
// marked) and end after its backward, then ReduceGrads and OptimizerStep. A schedule that
// needs more slots than the stage has, or other stages without a pipeline group, is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/small_models.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"

using namespace zt;
using namespace zt::pipeline;

namespace {

constexpr int64_t kB = 2, kT = 5;

struct Batches {
  std::vector<std::vector<int32_t>> tokens, targets;
  explicit Batches(int n, int64_t V) {
    for (int m = 0; m < n; ++m) {
      Philox rng(static_cast<uint64_t>(m) + 1, 3);
      tokens.emplace_back(static_cast<size_t>(kB * kT));
      targets.emplace_back(tokens.back().size());
      for (size_t i = 0; i < tokens.back().size(); ++i) {
        tokens.back()[i] = static_cast<int32_t>(rng.block(i)[0] % V);
        targets.back()[i] = static_cast<int32_t>(rng.block(i)[1] % V);
      }
    }
  }
  MicroBatchData at(int m) {
    return {Tensor(tokens[m].data(), {kB, kT}, DType::I32), Tensor(targets[m].data(), {kB, kT}, DType::I32), Tensor()};
  }
};

struct RecordingDriver : StepDriver {
  model::ModelStage& stage;
  Batches& batches;
  std::vector<std::string> events;
  std::vector<double> losses;
  RecordingDriver(model::ModelStage& s, Batches& b) : stage(s), batches(b) {}
  MicroBatchData load(int m) override {
    events.push_back("load " + std::to_string(m));
    return batches.at(m);
  }
  void begin_micro_batch(int m, Boundary b) override {
    events.push_back("begin " + std::to_string(m) + (b == Boundary::Last ? " last" : ""));
    stage.set_dropout_seed(7, static_cast<uint64_t>(m));  // as the step protocol seeds each micro-batch
  }
  void end_micro_batch(int m) override { events.push_back("end " + std::to_string(m)); }
  float grad_scale(int) override { return 0.5f; }
  void loss(int m, const ops::CrossEntropyResult& r) override {
    events.push_back("loss " + std::to_string(m));
    losses.push_back(r.loss_sum);
  }
  void reduce_grads() override { events.push_back("reduce"); }
  void optimizer_step() override { events.push_back("step"); }
};

std::vector<std::vector<char>> grad_bytes(model::Transformer& m) {
  std::vector<std::vector<char>> out;
  for (auto& u : m.registry().units()) {
    const Tensor g = u->flat_grads();
    const char* p = static_cast<const char*>(g.data());
    out.emplace_back(p, p + g.nbytes());
  }
  return out;
}

}  // namespace

TEST(PipelineExecutor, OneStageSchedulesGiveTheAccumulationLoopBitwise) {
  const model::ModelConfig c = zt::testing::micro_config(model::Family::GPT2);  // dropout on
  const int M = 3;
  Batches batches(M, c.vocab_size);

  model::Transformer loop(c, model::ModelOptions());
  loop.init_weights(5);
  loop.zero_grads();
  std::vector<double> expected;
  for (int m = 0; m < M; ++m) {
    loop.set_dropout_seed(7, static_cast<uint64_t>(m));
    const MicroBatchData d = batches.at(m);
    expected.push_back(loop.forward_backward(d.tokens, d.targets, 0.5f).loss_sum);
  }

  for (const Schedule& schedule : {data_parallel_schedule(M), gpipe_schedule(1, M), one_f_one_b_schedule(1, M)}) {
    SCOPED_TRACE(schedule.name());
    model::Transformer model(c, model::ModelOptions());
    model.init_weights(5);
    model.zero_grads();
    model::ModelStage stage(model.config(), model.options(), model.registry(),
                            model::StageSpec::whole(c, schedule.slots(0)));
    RecordingDriver driver(stage, batches);
    Executor(stage, nullptr, driver).run(schedule, 0);
    ASSERT_EQ(driver.losses.size(), static_cast<size_t>(M));
    for (int m = 0; m < M; ++m) EXPECT_EQ(std::memcmp(&driver.losses[m], &expected[m], sizeof(double)), 0);
    EXPECT_TRUE(grad_bytes(model) == grad_bytes(loop));
    EXPECT_EQ(driver.events.back(), "step");
    EXPECT_EQ(driver.events[driver.events.size() - 2], "reduce");
  }

  // The data-parallel schedule's driver calls: today's loop, the last micro-batch marked.
  model::Transformer model(c, model::ModelOptions());
  model.init_weights(5);
  RecordingDriver driver(model.stage(), batches);
  Executor(model.stage(), nullptr, driver).run(data_parallel_schedule(2), 0);
  EXPECT_EQ(driver.events, (std::vector<std::string>{"begin 0", "load 0", "loss 0", "end 0", "begin 1 last", "load 1",
                                                     "loss 1", "end 1", "reduce", "step"}));
}

TEST(PipelineExecutor, RefusesWhatTheStageCannotRun) {
  const model::ModelConfig c = zt::testing::micro_config(model::Family::Llama);
  model::Transformer model(c, model::ModelOptions());
  model.init_weights(5);
  Batches batches(2, c.vocab_size);
  RecordingDriver driver(model.stage(), batches);
  EXPECT_THROW(Executor(model.stage(), nullptr, driver).run(gpipe_schedule(1, 2), 0), Error) << "2 slots needed";
  EXPECT_THROW(Executor(model.stage(), nullptr, driver).run(gpipe_schedule(2, 1), 0), Error)
      << "a stage with the head is not stage 0 of 2";
  model::ModelStage first(model.config(), model.options(), model.registry(), {0, 1, 1});
  RecordingDriver first_driver(first, batches);
  EXPECT_THROW(Executor(first, nullptr, first_driver).run(gpipe_schedule(2, 1), 0), Error) << "no pipeline group";
  EXPECT_TRUE(driver.events.empty() && first_driver.events.empty()) << "refused before any instruction";
}
