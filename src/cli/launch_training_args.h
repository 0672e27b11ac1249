// Accelerate's training settings given to `zerotrain launch` reach the training command:
// `accelerate launch` hands its --mixed_precision, --use_deepspeed, --zero_stage, ... and its
// config file's mixed_precision / deepspeed_config / num_processes to the script's
// Accelerator (through ACCELERATE_* variables); here they become a `zerotrain train`
// command's own options (`--config_file acc.yaml --mixed_precision bf16
// --deepspeed_config.zero_stage 2`), which --dry-run shows. Any other command cannot take
// them: flags for it are an error, a config file's settings a note.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace zt::cli {

// accelerate launch's training flags; empty / negative means not given.
struct AccelerateTrainingFlags {
  bool use_deepspeed = false;            // --use_deepspeed (implied by the DeepSpeed flags below)
  bool use_cpu = false;                  // --cpu
  std::string mixed_precision;           // --mixed_precision no|fp16|bf16
  std::string deepspeed_config_file;     // --deepspeed_config_file FILE
  int zero_stage = -1;                   // --zero_stage 0..3
  int gradient_accumulation_steps = 0;   // --gradient_accumulation_steps N
  std::string gradient_clipping;         // --gradient_clipping X (as written)
  std::string offload_optimizer_device;  // --offload_optimizer_device none|cpu|nvme
  std::string offload_param_device;      // --offload_param_device none|cpu|nvme
  bool any() const;
  // The flags as written, for messages: "--mixed_precision bf16 --zero_stage 2".
  std::string describe() const;
};

// Throws BadInput naming the flag for a value Accelerate would refuse (the command then
// never starts half a job that fails on its options).
void check_training_flag_values(const AccelerateTrainingFlags& flags);

// What launch read from its --config_file, for the training command.
struct LaunchYaml {
  std::string path;                  // "" when none was given (or it was not an Accelerate YAML)
  std::optional<int> num_processes;  // as written in it
  // Its settings that only the training command uses ("mixed_precision", "deepspeed_config").
  std::vector<std::string> training_keys;
};

// Whether `command` is `zerotrain train ...` (any path to a program named zerotrain).
bool is_zerotrain_train(const std::vector<std::string>& command);

// The command every rank runs. A `zerotrain train` command gets `--config_file PATH` (unless
// it names that file already), `--num_processes WORLD` when the YAML says another number (the
// launch flags or the hostfile decided), and the flags as its overrides. Throws BadInput when
// the command names another --config_file, sets one of these keys to another value, or is not
// `zerotrain train` while flags were given; adds a note when only the YAML's settings are left
// behind.
std::vector<std::string> command_with_training_settings(const std::vector<std::string>& command,
                                                        const AccelerateTrainingFlags& flags, const LaunchYaml& yaml,
                                                        int world_size, std::vector<std::string>& notes);

}  // namespace zt::cli
