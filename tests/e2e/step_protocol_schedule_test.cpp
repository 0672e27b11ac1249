// train::OptimizerStep::run (train/step_protocol.h): the step as the data-parallel schedule
// (pipeline/schedule.h) run by pipeline::Executor gives today's loop of MicroBatch scopes
// bit for bit: the losses of every step, the parameters after them, the loss scale, the
// micro-step count and the learning rate. Also with activation checkpointing, and with
// ZeRO stages 2 and 3's machinery kept on one process (ZT_ZERO_KEEP_STAGE=1: the engine's
// micro-batch bracket, reductions at the last micro-batch, stage 3's gathers and releases).
// The small run accumulates 2 micro-batches; tiny-gpt2 has dropout, seeded per micro-batch.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "train/step_protocol.h"
#include "train/training_run.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 3;

struct Trace {
  std::vector<double> losses;  // per step: the micro-batches' mean losses summed
  std::vector<int64_t> targets;
  std::vector<float> lrs;
  std::vector<double> norms;
  std::vector<std::vector<char>> params;
  int64_t micro_steps = 0;
};

std::vector<std::vector<char>> param_bytes(train::TrainingRun& run) {
  std::vector<std::vector<char>> out;
  for (auto& u : run.model().registry().units()) {
    if (!u->has_params()) continue;  // stage 3: a slice of it lives in the engine
    const Tensor t = u->flat_params();
    const char* p = static_cast<const char*>(t.data());
    out.emplace_back(p, p + t.nbytes());
  }
  return out;
}

enum class Driven { Loop, Schedule };

Trace train_steps(const std::string& name, Driven driven, std::vector<std::string> extra) {
  const fs::path dir = zt::testing::fresh_test_dir("step_schedule_", name);
  Trace trace;
  {
    auto run = train::start_training_run(zt::testing::small_run(dir, extra));
    EXPECT_EQ(run->grad_accum, 2);
    std::vector<OwnedTensor> tok, tgt;
    for (int64_t m = 0; m < run->grad_accum; ++m) {
      tok.emplace_back(Shape{run->micro_batch, run->seq_len}, DType::I32);
      tgt.emplace_back(Shape{run->micro_batch, run->seq_len}, DType::I32);
    }
    for (int s = 0; s < kSteps; ++s) {
      train::OptimizerStep step(*run);
      double loss = 0;
      int64_t targets = 0;
      train::StepOutcome outcome;
      if (driven == Driven::Loop) {
        for (int64_t m = 0; m < run->grad_accum; ++m) {
          run->loader->next(tok[m], tgt[m]);
          train::OptimizerStep::MicroBatch micro = step.micro_batch();
          loss += micro.forward_backward(tok[m], tgt[m]);
          targets += micro.targets();
        }
        outcome = step.finish(run->config.gradient_clipping);
      } else {
        const auto r = step.run(
            [&](int64_t m) {
              run->loader->next(tok[m], tgt[m]);
              return pipeline::MicroBatchData{tok[m], tgt[m], Tensor()};
            },
            run->config.gradient_clipping);
        loss = r.loss_sum;
        targets = r.targets;
        outcome = r.outcome;
        EXPECT_TRUE(step.finished());
      }
      trace.losses.push_back(loss);
      trace.targets.push_back(targets);
      trace.lrs.push_back(outcome.lr);
      trace.norms.push_back(outcome.grad_norm);
    }
    trace.params = param_bytes(*run);
    trace.micro_steps = run->micro_steps;
  }
  fs::remove_all(dir);
  return trace;
}

void expect_bitwise(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_EQ(std::memcmp(&a.losses[s], &b.losses[s], sizeof(double)), 0) << "step " << s;
    EXPECT_EQ(std::memcmp(&a.norms[s], &b.norms[s], sizeof(double)), 0) << "step " << s;
    EXPECT_EQ(a.lrs[s], b.lrs[s]);
    EXPECT_EQ(a.targets[s], b.targets[s]);
  }
  EXPECT_TRUE(a.params == b.params);
  EXPECT_EQ(a.micro_steps, b.micro_steps);
}

}  // namespace

TEST(OptimizerStepSchedule, TheDataParallelScheduleIsTodaysStepBitwise) {
  expect_bitwise(train_steps("loop", Driven::Loop, {}), train_steps("schedule", Driven::Schedule, {}));
}

TEST(OptimizerStepSchedule, WithActivationCheckpointing) {
  const std::vector<std::string> cp{"--model.activation_checkpointing", "true"};
  expect_bitwise(train_steps("loop_cp", Driven::Loop, cp), train_steps("schedule_cp", Driven::Schedule, cp));
}

TEST(OptimizerStepSchedule, WithZeroStagesTwoAndThree) {
  const zt::testing::ScopedEnv keep("ZT_ZERO_KEEP_STAGE", "1");
  for (const std::string stage : {"2", "3"}) {
    SCOPED_TRACE("stage " + stage);
    const std::vector<std::string> zero{"--zero_optimization.stage", stage};
    expect_bitwise(train_steps("loop_z" + stage, Driven::Loop, zero),
                   train_steps("schedule_z" + stage, Driven::Schedule, zero));
  }
}

// run() takes a fresh step: after a micro-batch scope it is refused.
TEST(OptimizerStepSchedule, RunsOnlyAFreshStep) {
  const fs::path dir = zt::testing::fresh_test_dir("step_schedule_", "fresh");
  {
    auto run = train::start_training_run(zt::testing::small_run(dir));
    OwnedTensor tok({run->micro_batch, run->seq_len}, DType::I32), tgt({run->micro_batch, run->seq_len}, DType::I32);
    train::OptimizerStep step(*run);
    {
      train::OptimizerStep::MicroBatch micro = step.micro_batch();
      run->loader->next(tok, tgt);
      micro.forward_backward(tok, tgt);
    }
    EXPECT_THROW(step.run([&](int64_t) { return pipeline::MicroBatchData{tok, tgt, Tensor()}; }, 0), Error);
  }
  fs::remove_all(dir);
}
