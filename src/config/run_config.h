// The run config (YAML or JSON): what DeepSpeed leaves to the training script (model,
// data, steps/epochs, eval/save, output, samples), plus the HF Trainer keys people
// expect (learning_rate, per_device_train_batch_size, bf16, deepspeed: path, ...).
// load_train_config assembles everything a `zerotrain train` command line names into one
// resolved TrainConfig.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "config/config_value.h"
#include "config/ds_config.h"

namespace zt::config {

// A run config as read. Which key lands where is its row's (config_keys_run.cpp): the
// keys TrainConfig takes as they are fill `train`; the others wait here for the
// documents they meet (ds_config "auto" values, precision, optimizer and schedule blocks,
// the device, the files the run names).
struct RunConfig {
  std::string source;
  // HF TrainingArguments keys accepted with no effect here, one line each (printed at start).
  std::vector<std::string> warnings;
  // model, data, the loop, evaluation and saving, output, seeds, resume, samples: the
  // rows' values or defaults (the rest at TrainConfig's defaults).
  TrainConfig train;
  bool report_tensorboard = false;  // report_to names tensorboard (or all)
  std::string logging_dir;          // HF's logging_dir ("": output_dir/runs)
  Setting<std::string> device{"auto"};                 // auto: cuda when a GPU is visible, else cpu
  Setting<std::string> metric_for_best_model{"loss"};  // the validation loss either way
  // HF Trainer-style keys.
  Setting<double> learning_rate{5e-5}, weight_decay{0.0}, max_grad_norm{1.0};
  Setting<double> adam_beta1{0.9}, adam_beta2{0.999}, adam_epsilon{1e-8};
  Setting<int64_t> per_device_train_batch_size{8}, gradient_accumulation_steps{1};
  Setting<std::string> lr_scheduler_type{"linear"};
  Setting<std::string> optim{"adamw"};  // adamw | adam | sgd | lion (with no ds optimizer block)
  Setting<bool> bf16{false}, fp16{false};
  // false: bf16 parameters are updated in place with bf16 optimizer state and no f32 master
  // copy (PyTorch's pure-bf16 AdamW; zero::MasterWeights::None). bf16 runs only.
  Setting<bool> master_weights{true};
  // LoRA: the lora: section as PEFT's LoraConfig (lora_where names it in messages), and
  // the peft (an adapter_config.json) and adapter (a PEFT adapter folder) paths.
  std::optional<model::LoraConfig> lora;
  std::string lora_where;
  std::string peft, adapter;
  std::string deepspeed;          // ds_config.json path ("" = none)
  std::string accelerate_config;  // Accelerate YAML path ("" = none)
  // The canonical keys (config_keys_run.cpp) this document writes, for the origins that
  // `zerotrain config check` prints.
  std::vector<std::string> written;
  bool wrote(const std::string& canonical_key) const;
};

RunConfig parse_run_config(const nlohmann::json& doc, const std::string& source);

// The top-level keys a run config may hold, aliases included (for override routing).
const std::vector<std::string>& run_top_level_keys();

// Whose run config the first argument is. BuiltIn: `zerotrain train` with no run file of
// its own took examples/default_run.yaml: its batch, optimizer, schedule, clipping,
// logging and seed settings are defaults that a ds_config (or Accelerate YAML) given
// with it overrides, instead of disagreeing with it (the mismatch rule is for what the
// user wrote in two places).
enum class RunDocument { User, BuiltIn };

// Who set LoadOptions::world_size: a launcher (its RANK / WORLD_SIZE, MPI's or SLURM's
// variables), or nobody: a process started on its own, which an Accelerate YAML's
// num_processes cannot turn into more.
enum class WorldSource { Launcher, PlainProcess };

struct LoadOptions {
  int world_size = 0;  // the real data-parallel world; 0: Accelerate's num_processes, else 1
  // With world_size set, an Accelerate YAML's num_processes that differs from it is a warning
  // under a launcher and an error (exit 2) for a plain process: never silent.
  WorldSource world_source = WorldSource::Launcher;
  RunDocument run_document = RunDocument::User;
};

// Loads `[run.yaml|run.json] [--deepspeed ds.json] [--config_file accelerate.yaml]
// [--section.key value | --section.key=value ...]` into a resolved TrainConfig:
// documents loaded, overrides applied to the document that owns each key, "auto"
// resolved, everything validated (BadInput/Unsupported naming file, key and fix).
// With no arguments the result is the defaults (the trainer's built-in run decides).
TrainConfig load_train_config(const std::vector<std::string>& args, const LoadOptions& options = {});

// Whether the `zerotrain train` arguments name a model (--model, --model.path,
// --model_name_or_path, --model.preset, --model.config) or data (--data, --data.train,
// --data.validation). Without a run file such a command line is a run of its own: the
// settings it does not give are HF Trainer's defaults (RunConfig's), not the built-in
// run's (examples/default_run.yaml, which is taken only when neither is named).
bool command_line_names_model_or_data(const std::vector<std::string>& args);

// For epoch-based runs the total number of optimizer steps is known only once the data
// is: fills the scheduler's deferred "auto" total_num_steps / warmup and warmup_ratio.
void set_total_steps(TrainConfig& config, int64_t total_steps);

// Sets doc[a][b][c] = value for the dotted key "a.b.c" (creating mappings on the way);
// throws BadInput naming `what` when a step is not a mapping.
void set_dotted(nlohmann::json& doc, const std::string& dotted, const nlohmann::json& value, const std::string& what);

}  // namespace zt::config
