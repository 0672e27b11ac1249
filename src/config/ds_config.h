// DeepSpeed ds_config.json, read unchanged (keys, defaults and semantics of DeepSpeed
// 0.19; see shared/reference/ds_config.md and docs/configs.md for each key's status).
//
// Two steps, so that one file can be checked without a run and resolved against one:
//   parse_ds_config:   validates keys, types and combinations; keeps "auto" as Given::Auto.
//   resolve_ds_config: fills "auto" (and absent batch keys) from a RunContext, derives
//                      the batch sizes, checks them against the run, writes TrainConfig.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "config/config_value.h"

namespace zt::config {

// What "auto" resolves from: the training run's own settings (HF TrainingArguments in
// spirit). A Setting that is_set() was written explicitly by the user; a ds_config value
// that differs from an explicit run value is an error (HF Trainer's "mismatch" rule).
struct RunContext {
  int world_size = 1;                        // data-parallel ranks
  Setting<int64_t> micro_batch{8};           // per_device_train_batch_size
  Setting<int64_t> grad_accum{1};            // gradient_accumulation_steps
  Setting<double> lr{5e-5};                  // learning_rate
  Setting<double> beta1{0.9}, beta2{0.999};  // adam_beta1/2
  Setting<double> eps{1e-8};                 // adam_epsilon
  Setting<double> weight_decay{0.0};
  Setting<double> max_grad_norm{1.0};
  Setting<Precision> precision{Precision::F32};  // bf16/fp16 flags, Accelerate mixed_precision
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;                    // optimizer steps; 0 = not known yet (epoch-based run)
  int64_t hidden_size = 0;                    // 0 = not known; needed only by the size "auto"s
  std::string run_source = "the run config";  // names the run's side in mismatch errors
};

// A section's "enabled" as a Setting: its value and how it was written.
inline Setting<bool> enabled_setting(bool value, const std::map<std::string, Given>& given) {
  const auto it = given.find("enabled");
  return Setting<bool>(it == given.end() ? Given::Absent : it->second, value);
}

struct DsConfig {
  std::string source;  // the file (and "+ command line" when overridden)

  // The top level's scalars (config_keys_top.cpp's table) and how each was written; the
  // Settings below pair a value with that ("auto" ones are filled by resolve_ds_config).
  DsTopLevel top;
  std::map<std::string, Given> top_given;
  template <class T>
  Setting<T> top_setting(const std::string& key, T value) const {
    const auto it = top_given.find(key);
    return Setting<T>(it == top_given.end() ? Given::Absent : it->second, value);
  }
  Setting<int64_t> train_batch_size() const { return top_setting("train_batch_size", top.train_batch_size); }
  Setting<int64_t> micro_batch() const {
    return top_setting("train_micro_batch_size_per_gpu", top.train_micro_batch_size_per_gpu);
  }
  Setting<int64_t> grad_accum() const {
    return top_setting("gradient_accumulation_steps", top.gradient_accumulation_steps);
  }
  Setting<double> gradient_clipping() const { return top_setting("gradient_clipping", top.gradient_clipping); }
  Setting<int64_t> steps_per_print() const { return top_setting("steps_per_print", top.steps_per_print); }
  Setting<int64_t> seed() const { return top_setting("seed", top.seed); }

  // fp16 / bf16 ("bfloat16" alias): config_keys_precision.cpp's tables, and how each key
  // was written; "enabled" may be "auto" (decided from the run by resolve_ds_config).
  Fp16Section fp16;
  std::map<std::string, Given> fp16_given;
  Bf16Section bf16;
  std::map<std::string, Given> bf16_given;
  Setting<bool> fp16_enabled() const { return enabled_setting(fp16.enabled, fp16_given); }
  Setting<bool> bf16_enabled() const { return enabled_setting(bf16.enabled, bf16_given); }

  // optimizer: {"type", "params"}
  bool has_optimizer = false;
  zero::OptimizerType optimizer_type = zero::OptimizerType::AdamW;
  std::string optimizer_type_name;  // as written
  // Its params (config_keys_optimizer.cpp's table) and how each was written; "betas" is
  // an array, read into beta1/beta2 by parse_optimizer.
  OptimizerParams params;
  std::map<std::string, Given> params_given;
  Setting<double> beta1{0.9}, beta2{0.999};
  Setting<double> param_setting(const std::string& key, double value) const {
    const auto it = params_given.find(key);
    return Setting<double>(it == params_given.end() ? Given::Absent : it->second, value);
  }
  Setting<double> lr() const { return param_setting("lr", params.lr); }
  Setting<double> eps() const { return param_setting("eps", params.eps); }
  Setting<double> weight_decay() const { return param_setting("weight_decay", params.weight_decay); }

  // scheduler: validated, kept as written ("auto" params resolved later).
  nlohmann::json scheduler = nlohmann::json::object();

  // zero_optimization
  bool has_zero_section = false;
  int stage = 0;
  // Every zero_optimization key's value (config_keys_zero.cpp's table says which field),
  // and how each was given: "auto" ones are filled by resolve_ds_config.
  ZeroSection zero;
  std::map<std::string, Given> zero_given;  // canonical key -> how it was written (absent: not in the map)
  // The offload dicts are read into zero.offload_optimizer / offload_param; whether each
  // was written (for its origin).
  Given offload_optimizer_given = Given::Absent, offload_param_given = Given::Absent;

  AioSection aio;  // config_keys_aio.cpp's table
  std::map<std::string, Given> aio_given;
  bool has_activation_checkpointing = false;
  ActivationCheckpointingSection activation_checkpointing;  // config_keys_checkpointing.cpp's table
  std::map<std::string, Given> checkpointing_given;

  std::string communication_data_type, grad_accum_dtype;
  std::vector<std::string> warnings;
  // tensorboard {enabled: true}: DeepSpeed's log folder, output_path/job_name ("": off).
  std::string tensorboard_dir;
  // csv_monitor enabled: its output_path/job_name ("" when off).
  std::string csv_monitor_dir;
};

// Validates a ds_config document. `source` names it in errors (usually its path).
DsConfig parse_ds_config(const nlohmann::json& doc, const std::string& source);
DsConfig load_ds_config(const std::string& path);

// Fills "auto" from the run and writes the DeepSpeed part of `out` (batch, precision,
// loss scaler, optimizer, scheduler, clipping, zero, aio, activation checkpointing).
// Missing batch keys count as "auto" when none of the three is given (as Accelerate fills
// them from the dataloader); DeepSpeed's derivation rule applies to the rest.
void resolve_ds_config(const DsConfig& ds, const RunContext& run, TrainConfig& out);

// DeepSpeed's rule train_batch_size = micro * gas * world, completing what is missing
// (0 = not given). Throws BadInput naming `source` when inconsistent or underdetermined.
struct BatchSizes {
  int64_t train_batch_size, micro_batch, grad_accum;
};
BatchSizes derive_batch_sizes(int64_t train_batch_size, int64_t micro_batch, int64_t grad_accum, int world_size,
                              const std::string& source);

// The top-level keys a ds_config may hold (for routing command-line overrides): every
// spelling of config_keys_top.cpp's table.
const std::vector<std::string>& ds_top_level_keys();

// Validates a "scheduler" block ({"type", "params"}), returning it with the type name
// canonical and numeric strings turned into numbers.
nlohmann::json validate_scheduler(const nlohmann::json& block, const Where& w);

}  // namespace zt::config
