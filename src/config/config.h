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
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/lora_config.h"
#include "zero/loss_scaler.h"
#include "zero/optimizer.h"
#include "zero/options.h"

namespace zt::config {

enum class Precision { F32, BF16, F16 };
using OffloadDevice = zero::OffloadDevice;
enum class CheckpointSaves { Steps, Epoch, None };  // save_strategy: steps | epoch | no
enum class Evaluations { Steps, Epoch, None };      // eval_strategy: steps | epoch | no
enum class OutputDirOverwrite { No, Yes };   // overwrite_output_dir

struct ModelSection {
  std::string preset;     // a built-in preset name, or
  std::string path;       // an HF model directory (config.json + safetensors), or
  std::string config_file;  // an HF config.json: its shape, randomly initialised (from_config)
  std::string tokenizer;  // tokenizer file/dir; default: the model dir, or trained for the built-in run
  bool activation_checkpointing = false;
};

struct DataSection {
  std::vector<std::string> train;  // text files/dirs/JSONL, or token shards (.bin)
  std::vector<std::string> validation;
  std::string jsonl_field = "text";
  std::string chat_template;       // SFT conversations: a built-in name or a file; "" = the tokenizer's
  bool skip_bad_records = false;   // count and skip unreadable JSONL records
  bool packing = false;            // SFT samples packed into windows (attention and positions per sample)
  int64_t seq_len = 0;                // 0: the model's context
  double validation_fraction = 0.05;  // split off the train text when no validation set
};

// zero_optimization as resolved. The engine-facing options are the base (the engine takes
// this struct as its ZeroOptions; training_run only lowers the stage to what the world
// size allows); the rest are DeepSpeed's other keys, read here and acted on by the
// trainer (stage3_gather_16bit_weights_on_model_save) or warned about (inert_keys.cpp).
// Which key fills which field, its default, "auto" rule and status: config_keys_zero.cpp.
struct ZeroSection : zero::ZeroOptions {
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t allgather_bucket_size = 500000000;
  bool allgather_partitions = true;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  // The offload dicts (and the deprecated cpu_offload booleans mapped onto them).
  zero::OffloadOptimizerOptions offload_optimizer;
  zero::OffloadParamOptions offload_param;

  // The rest of zero_optimization, as DeepSpeed defines it.
  bool round_robin_gradients = false;
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  bool ignore_unused_parameters = true;
  int64_t stage3_model_persistence_threshold = INT64_MAX;
  // Accelerate's zero3_init_flag: build stage-3 parameters already partitioned.
  bool zero3_init = false;
};

// Whether offload_param {device: cpu or nvme} takes effect: at stage 3, together with
// offload_optimizer at ratio 1 (its state in host memory or on NVMe), whose host optimizer
// then updates the offloaded partitions in place (host memory; with nvme, the units past
// max_in_cpu in a swap file). Alone (the optimizer on the GPU would need them there) it
// warns and the parameters stay on the device (inert_keys.cpp).
inline bool offloads_params(const ZeroSection& z) {
  return z.stage == 3 && z.offload_param.device != OffloadDevice::None &&
         z.offload_optimizer.device != OffloadDevice::None && z.offload_optimizer.ratio >= 1.0;
}

// Top-level "aio" (NVMe offload I/O).
// ds_config's top-level scalars (config_keys_top.cpp's table), as written; the sections
// and blocks have their own structs and parsers. Batch sizes and clipping may be "auto"
// (resolved from the run) and are resolved into TrainConfig's own fields.
struct DsTopLevel {
  int64_t train_batch_size = 0, train_micro_batch_size_per_gpu = 0, gradient_accumulation_steps = 0;
  double gradient_clipping = 1.0;
  int64_t steps_per_print = 10, seed = 1234;
  bool wall_clock_breakdown = false, memory_breakdown = false, prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  bool dataloader_drop_last = false, zero_allow_untested_optimizer = false, zero_force_ds_cpu_optimizer = true;
  bool dump_state = false, sparse_gradients = false;
  int64_t sequence_parallel_size = 1;
};

// ds_config "optimizer.params" (config_keys_optimizer.cpp's table), as written. Which
// params a type takes is the table's; "betas" (an array) is read by parse_optimizer.
struct OptimizerParams {
  double lr = 1e-3, eps = 1e-8, weight_decay = 0.0, momentum = 0.0, dampening = 0.0;
  bool adam_w_mode = true, bias_correction = true, amsgrad = false, nesterov = false;
};

// ds_config "fp16" (config_keys_precision.cpp's table): DeepSpeed's dynamic loss scaler
// as the engine takes it, and the section's other keys.
struct Fp16Section : zero::LossScalerConfig {
  bool auto_cast = false;                 // accepted: the model computes in fp16 throughout
  bool master_weights_and_grads = false;  // fp16_master_weights_and_grads: refused when true
};

// ds_config "bf16" / "bfloat16" (config_keys_precision.cpp's table).
struct Bf16Section {
  bool enabled = false;
  bool check_grad_overflow = true;                                  // skip a step whose gradients hold inf/nan
  bool immediate_grad_update = false;                               // accepted: updates happen at the boundary
  bool master_weights_and_grads = false, optimizer_states = false;  // refused when true
};

struct AioSection {
  int64_t block_size = 1048576;
  int queue_depth = 8;
  int intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

// ds_config "activation_checkpointing" options (whether to checkpoint at all is
// ModelSection::activation_checkpointing).
struct ActivationCheckpointingSection {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  int64_t number_checkpoints = 0;  // 0: not set (one per block)
};

// Where the processes come from (Accelerate YAML); the launcher and the trainer use it.
struct LaunchSection {
  std::string distributed_type = "NO";  // NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP
  int num_processes = 0;                // 0: not given
  int num_machines = 1;
  int machine_rank = 0;
  std::string main_process_ip;
  int main_process_port = 29500;
  std::string gpu_ids;  // "" or "all" or "0,1,..."
  std::string deepspeed_hostfile;
  std::string deepspeed_multinode_launcher;
  // DeepSpeed's --include / --exclude ("host:0,1@host"), which `zerotrain launch` applies.
  std::string deepspeed_inclusion_filter;
  std::string deepspeed_exclusion_filter;
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
  Fp16Section fp16;  // the loss scaler: acted on when precision is F16
  Bf16Section bf16;
  zero::OptimizerSpec optimizer;
  nlohmann::json scheduler;        // ds_config "scheduler" block, or {} for none
  std::string hf_scheduler;        // HF lr_scheduler_type when no ds scheduler ("" = constant)
  int64_t warmup_steps = 0;        // for hf_scheduler
  float gradient_clipping = 1.0f;  // 0 = off
  ZeroSection zero;
  AioSection aio;
  ActivationCheckpointingSection activation_checkpointing;
  LaunchSection launch;
  // Warmup as a fraction of total steps (HF warmup_ratio), applied by set_total_steps
  // when the total is known; 0 = use warmup_steps.
  double warmup_ratio = 0.0;

  // Less common ds_config top-level settings.
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  std::string communication_data_type;  // "" = follow precision; fp16 | bf16 | fp32
  std::string grad_accum_dtype;         // "" = default; fp32 | fp16 | bf16
  bool dataloader_drop_last = false;

  // Loop.
  int64_t max_steps = 0;  // optimizer steps; 0: from epochs
  double epochs = 1.0;
  int64_t steps_per_print = 10;
  int64_t eval_interval = 0;  // steps; 0 = only at the end
  int64_t eval_batches = 20;
  int64_t eval_batch_size = 0;  // sequences per evaluation batch; 0: the training micro batch
  int64_t save_interval = 0;  // steps; 0 = only at the end
  int64_t keep_last = 2;      // checkpoints kept
  // save_strategy: Steps saves every save_interval steps and at the end; None saves only
  // when a stop signal ends the run (benchmarks, throw-away runs).
  CheckpointSaves checkpoint_saves = CheckpointSaves::Steps;
  // eval_strategy: Steps evaluates every eval_interval steps and at the end; Epoch at the
  // end of every epoch and at the end; None never.
  Evaluations evaluations = Evaluations::Steps;
  // load_best_model_at_end: final/ holds the checkpoint with the best validation loss (kept
  // by the checkpoint rotation); early stopping ends the run after `patience` evaluations
  // without an improvement larger than `threshold` (0: never).
  bool load_best_model_at_end = false;
  // report_to tensorboard: the folder of the TensorBoard event files ("": none written).
  std::string tensorboard_dir;
  // ds_config csv_monitor: the folder of DeepSpeed's per-tag CSV files ("": none written).
  std::string csv_monitor_dir;
  // Whose tag names: HF Trainer's (train/loss at the step) or DeepSpeed's monitor's
  // (Train/Samples/train_loss at the samples seen).
  enum class TensorBoardTags { Hf, DeepSpeed } tensorboard_tags = TensorBoardTags::Hf;
  bool greater_is_better = false;
  int64_t early_stopping_patience = 0;
  double early_stopping_threshold = 0.0;
  std::string output_dir = "out";
  // No: a run without --resume refuses an output_dir holding a run; Yes: replaces it.
  OutputDirOverwrite overwrite_output_dir = OutputDirOverwrite::No;
  int64_t stop_grace_seconds = 0;  // first stop signal -> immediate exit after this long (0: none)
  uint64_t seed = 1234;
  std::optional<uint64_t> data_seed;  // the data order's seed (HF's data_seed); unset: seed
  uint64_t data_order_seed() const { return data_seed.value_or(seed); }
  std::string resume;          // "" | "latest" | a checkpoint dir
  std::string device = "cpu";  // cpu | cuda

  // LoRA (issue 20, docs/lora.md): set, the base model is frozen and adapters train. From
  // the run file's lora: section, --peft (PEFT's adapter_config.json) or --adapter (a PEFT
  // adapter folder, whose adapter_config.json it is and whose tensors the adapters start
  // from); one of the three.
  std::optional<model::LoraConfig> lora;
  std::string lora_source;  // where the settings came from, for messages ("run.yaml: lora", a file)
  std::string adapter;      // --adapter DIR ("": the adapters start at PEFT's init)

  // Samples printed after training (and at eval when sample_every_eval).
  std::vector<std::string> sample_prompts;
  int64_t sample_tokens = 0;
  float sample_temperature = 0.8f;
  int sample_top_k = 40;

  // Provenance for `zerotrain config check`: resolved key (as printed) -> where its
  // value came from ("default" when absent): a file name, "auto (<from>)", "command line".
  std::map<std::string, std::string> origin;
  // Non-fatal notes gathered while loading (accepted-but-inert keys), logged by the caller.
  std::vector<std::string> warnings;
};

}  // namespace zt::config
