// The resolved configuration of a training run. It is assembled from what users bring:
//   - a run config (YAML or JSON) for what DeepSpeed leaves to the training script
//     (model, data, steps/epochs, eval/save intervals, output dir, seed, samples),
//   - a DeepSpeed ds_config.json (batch sizes, precision, optimizer, scheduler, ZeRO,
//     offload, activation checkpointing, clipping), given directly or through
//   - an Accelerate YAML (mixed_precision, num_processes, deepspeed_config: {...}),
//   - command-line overrides (--section.key value),
// with "auto" values resolved from the run. See docs/configs.md for every key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "zero/loss_scaler.h"
#include "zero/optimizer.h"

namespace zt::train {

enum class Precision { F32, BF16, F16 };
enum class OffloadDevice { None, CPU, NVMe };

struct ModelSection {
  std::string preset;        // a built-in preset name, or
  std::string path;          // an HF model directory (config.json + safetensors)
  std::string tokenizer;     // tokenizer file/dir; default: the model dir, or trained for the built-in run
  bool activation_checkpointing = false;
};

struct DataSection {
  std::vector<std::string> train;  // text files/dirs/JSONL, or token shards (.bin)
  std::vector<std::string> validation;
  std::string jsonl_field = "text";
  int64_t seq_len = 0;       // 0: the model's context
  double validation_fraction = 0.05;  // split off the train text when no validation set
};

struct ZeroSection {
  int stage = 0;
  bool overlap_comm = false;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  bool allgather_partitions = true;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  OffloadDevice offload_optimizer = OffloadDevice::None;
  OffloadDevice offload_param = OffloadDevice::None;
  std::string offload_optimizer_nvme_path, offload_param_nvme_path;
  bool offload_pin_memory = true;
};

struct TrainConfig {
  // Where each value came from, for `config check` and errors ("ds_config.json: ...").
  std::string source;

  ModelSection model;
  DataSection data;

  // Batch: train_batch_size = micro_batch_per_gpu * grad_accum_steps * world_size.
  int64_t train_batch_size = 0;
  int64_t micro_batch_per_gpu = 1;
  int64_t grad_accum_steps = 1;
  int world_size = 1;

  Precision precision = Precision::F32;
  zero::LossScalerConfig loss_scaler;  // fp16 only
  zero::OptimizerSpec optimizer;
  nlohmann::json scheduler;             // ds_config "scheduler" block, or {} for none
  std::string hf_scheduler;             // HF lr_scheduler_type when no ds scheduler ("" = constant)
  int64_t warmup_steps = 0;             // for hf_scheduler
  float gradient_clipping = 1.0f;       // 0 = off
  ZeroSection zero;

  // Loop.
  int64_t max_steps = 0;     // optimizer steps; 0: from epochs
  double epochs = 1.0;
  int64_t steps_per_print = 10;
  int64_t eval_interval = 0;  // steps; 0 = only at the end
  int64_t eval_batches = 20;
  int64_t save_interval = 0;  // steps; 0 = only at the end
  int64_t keep_last = 2;      // checkpoints kept
  std::string output_dir = "out";
  uint64_t seed = 1234;
  std::string resume;         // "" | "latest" | a checkpoint dir
  std::string device = "cpu"; // cpu | cuda

  // Samples printed after training (and at eval when sample_every_eval).
  std::vector<std::string> sample_prompts;
  int64_t sample_tokens = 0;
  float sample_temperature = 0.8f;
  int sample_top_k = 40;
};

}  // namespace zt::train
