// train::OptimizerStep (train/step_protocol.h), the one order of an optimizer step: every
// out-of-order call is refused (a finish() before the last micro-batch, a micro-batch too
// many, two scopes at once, two passes in one scope, a second finish()), and a micro-batch
// scope left by an exception or without its pass ends nothing and leaves a step that
// cannot be finished. The steps themselves are checked bitwise against `zerotrain train`
// by tests/e2e/accelerator_test.cpp and tests/comm/accelerator_multirank_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <stdexcept>

#include "common/small_run.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "train/step_protocol.h"
#include "train/training_run.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

struct SmallRun {
  fs::path dir;
  std::unique_ptr<train::TrainingRun> run;
  OwnedTensor tokens, targets;

  explicit SmallRun(const std::string& name) : dir(zt::testing::fresh_test_dir("step_protocol_", name)) {
    run = train::start_training_run(zt::testing::small_run(dir));  // accumulation 2
    tokens = OwnedTensor({run->micro_batch, run->seq_len}, DType::I32);
    targets = OwnedTensor({run->micro_batch, run->seq_len}, DType::I32);
  }
  ~SmallRun() {
    run.reset();
    fs::remove_all(dir);
  }
  double pass(train::OptimizerStep::MicroBatch& micro) {
    run->loader->next(tokens, targets);
    return micro.forward_backward(tokens, targets);
  }
};

}  // namespace

TEST(OptimizerStep, RefusesEveryOutOfOrderCall) {
  SmallRun r("order");
  ASSERT_EQ(r.run->grad_accum, 2);
  train::OptimizerStep step(*r.run);
  EXPECT_THROW(step.finish(0), Error) << "finish() before any micro-batch";
  {
    train::OptimizerStep::MicroBatch micro = step.micro_batch();
    EXPECT_THROW(step.micro_batch(), Error) << "a second scope while one is open";
    EXPECT_GT(r.pass(micro), 0.0);
    EXPECT_THROW(r.pass(micro), Error) << "two passes in one micro-batch";
  }
  EXPECT_EQ(step.micro_batches(), 1);
  EXPECT_FALSE(step.complete());
  EXPECT_THROW(step.finish(0), Error) << "finish() on half the accumulation";
  {
    train::OptimizerStep::MicroBatch micro = step.micro_batch();
    r.pass(micro);
  }
  EXPECT_TRUE(step.complete());
  EXPECT_EQ(r.run->micro_steps, 2);
  EXPECT_THROW(step.micro_batch(), Error) << "a third micro-batch in a step of two";
  const float lr = train::next_lr(*r.run);
  const train::StepOutcome out = step.finish(1.0);
  EXPECT_TRUE(out.applied);
  EXPECT_EQ(out.lr, lr);
  EXPECT_GT(out.grad_norm, 0.0);
  EXPECT_EQ(r.run->step, 1);
  EXPECT_EQ(r.run->optimizer->steps_taken(), 1);
  EXPECT_THROW(step.finish(1.0), Error) << "a second finish()";
  EXPECT_EQ(r.run->step, 1);
}

TEST(OptimizerStep, AScopeLeftByAnExceptionOrWithoutItsPassEndsNothing) {
  SmallRun r("failed");
  {
    train::OptimizerStep step(*r.run);
    try {
      train::OptimizerStep::MicroBatch micro = step.micro_batch();
      throw std::runtime_error("the data loader failed");
    } catch (const std::runtime_error&) {
    }
    EXPECT_TRUE(step.failed());
    EXPECT_EQ(step.micro_batches(), 0);
    EXPECT_EQ(r.run->micro_steps, 0) << "a failed micro-batch is not counted";
    EXPECT_THROW(step.micro_batch(), Error);
    EXPECT_THROW(step.finish(0), Error);
  }
  {
    train::OptimizerStep step(*r.run);  // a new step starts clean
    { train::OptimizerStep::MicroBatch forgotten = step.micro_batch(); }
    EXPECT_TRUE(step.failed()) << "a scope without its forward_backward()";
  }
  // And the run goes on: a whole step after the failed ones.
  train::OptimizerStep step(*r.run);
  for (int m = 0; m < 2; ++m) {
    train::OptimizerStep::MicroBatch micro = step.micro_batch();
    r.pass(micro);
  }
  EXPECT_TRUE(step.finish(0).applied);
  EXPECT_EQ(r.run->step, 1);
}
