// The built-in run: train a preset model on a text file with byte tokens, log one line
// per step, then sample. This is what `zerotrain train` does with no arguments; the
// config-driven trainer (ds_config.json, accelerate YAML, checkpoints) replaces its loop.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/transformer.h"

namespace zt::train {

struct SimpleRunOptions {
  std::string preset = "tiny-gpt2";
  std::string text_path;  // empty: the repo's data/text/gpl-3.txt
  int64_t steps = 300;
  int64_t batch_size = 8;
  int64_t seq_len = 128;
  float lr = 3e-3f;
  float min_lr_ratio = 0.1f;
  int64_t warmup_steps = 20;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
  uint64_t seed = 1337;
  int64_t log_interval = 10;
  int64_t eval_interval = 100;
  int64_t sample_tokens = 300;
  float temperature = 0.8f;
  int top_k = 40;
  std::string prompt = "The ";
  DType param_dtype = DType::F32;
  model::Checkpointing checkpointing = model::Checkpointing::None;
};

struct SimpleRunResult {
  double first_loss = 0;
  double final_loss = 0;
  double final_val_loss = 0;
  std::string sample;
};

SimpleRunResult run_simple_training(const SimpleRunOptions& options);

// Cosine decay to min_lr_ratio * lr after a linear warmup.
float cosine_lr(float lr, float min_ratio, int64_t warmup, int64_t total, int64_t step);

}  // namespace zt::train
