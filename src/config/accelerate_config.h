// Accelerate config YAML (default_config.yaml, `accelerate launch --config_file`), read as
// users write it (keys of Accelerate 1.15; see shared/reference/accelerate.md). Its
// DeepSpeed plugin keys (zero_stage, offload_*_device, gradient_accumulation_steps, ...)
// and any DeepSpeed sections written inline under deepspeed_config (or a top-level
// fp16/bf16 block) become a ds_config document, exactly as Accelerate builds one.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "config/config_value.h"

namespace zt::config {

struct AccelerateConfig {
  std::string source;
  LaunchSection launch;
  // mixed_precision: no | fp16 | bf16 (is_set() only when written).
  Setting<Precision> mixed_precision{Precision::F32};
  bool use_cpu = false;
  bool zero3_init = false;                // deepspeed_config.zero3_init_flag
  bool activation_checkpointing = false;  // fsdp_config.fsdp_activation_checkpointing
  // deepspeed_config.deepspeed_config_file, as a path usable from the current directory.
  std::string deepspeed_config_file;
  // The DeepSpeed settings the YAML itself carries, as a ds_config document ({} if none).
  nlohmann::json ds_doc = nlohmann::json::object();
  // The YAML keys that carry those settings ("deepspeed_config.zero_stage", "fp16", ...):
  // with a JSON file also given they would be ambiguous, which is an error.
  std::vector<std::string> ds_keys_in_yaml;
  std::vector<std::string> warnings;
};

AccelerateConfig parse_accelerate_config(const nlohmann::json& doc, const std::string& source);
AccelerateConfig load_accelerate_config(const std::string& path);

// Accelerate's rule: a YAML that points at (or comes with) a DeepSpeed JSON must not also
// set the JSON's settings. Throws BadInput naming every such key and the JSON.
void check_no_ds_duplication(const AccelerateConfig& acc, const std::string& json_path);

// The top-level keys an Accelerate YAML may hold (for routing command-line overrides).
const std::vector<std::string>& accelerate_top_level_keys();

}  // namespace zt::config
