// Optimizer steps of a started training run, driven as the trainer drives them (each step's
// micro-batches from the run's loader), for tests that inspect the model between steps.
#pragma once
#include "core/tensor.h"
#include "train/step_protocol.h"
#include "train/training_run.h"

namespace zt::testing {

inline void run_optimizer_steps(train::TrainingRun& run, int steps) {
  OwnedTensor tok({run.micro_batch, run.seq_len}, DType::I32), tgt({run.micro_batch, run.seq_len}, DType::I32);
  for (int s = 0; s < steps; ++s) {
    train::OptimizerStep step(run);
    for (int64_t m = 0; m < run.grad_accum; ++m) {
      train::OptimizerStep::MicroBatch micro = step.micro_batch();
      run.loader->next(tok, tgt);
      micro.forward_backward(tok, tgt);
    }
    step.finish(run.config.gradient_clipping);
  }
}

}  // namespace zt::testing
