// The training loop of `zerotrain train`: builds the model, tokenizer, data, optimizer,
// schedule and loss scaler from a resolved TrainConfig, then runs steps with gradient
// accumulation, clipping, fp16 loss scaling, evaluation, checkpoints (and resume),
// one log line per steps_per_print steps plus a JSONL metrics file, a final HF-format
// model, and samples.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"

namespace zt::train {

struct TrainResult {
  int64_t steps = 0;            // global steps (DeepSpeed's global_steps: skipped fp16 steps count)
  int64_t skipped_steps = 0;    // of those, skipped on fp16 overflow (no update, no lr step)
  int64_t optimizer_steps = 0;  // updates applied: steps - skipped_steps
  std::vector<double> losses;   // training loss of each global step run in this process
  double final_val_loss = std::numeric_limits<double>::quiet_NaN();  // NaN: none measured (no validation)
  std::string final_model_dir;  // HF directory written at the end
  std::string last_checkpoint;
  bool stopped_by_signal = false;
  std::vector<std::string> samples;
  bool early_stopped = false;  // early_stopping_patience ended the run before max_steps
  int64_t best_step = -1;      // the step of the best validation loss (-1: none evaluated)
};

TrainResult run_training(const config::TrainConfig& config);

}  // namespace zt::train
