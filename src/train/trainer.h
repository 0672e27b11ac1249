// The training loop of `zerotrain train`: builds the model, tokenizer, data, optimizer,
// schedule and loss scaler from a resolved TrainConfig, then runs steps with gradient
// accumulation, clipping, fp16 loss scaling, evaluation, checkpoints (and resume),
// one log line per steps_per_print steps plus a JSONL metrics file, a final HF-format
// model, and samples.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/config.h"

namespace zt::train {

struct TrainResult {
  int64_t steps = 0;            // optimizer steps taken (skipped fp16 steps not counted)
  int64_t skipped_steps = 0;
  std::vector<double> losses;   // training loss of each step run in this process
  double final_val_loss = 0;
  std::string final_model_dir;  // HF directory written at the end
  std::string last_checkpoint;
  bool stopped_by_signal = false;
  std::vector<std::string> samples;
};

TrainResult run_training(const TrainConfig& config);


}  // namespace zt::train
