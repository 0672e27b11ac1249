// A run's LoRA settings (issue 20, docs/lora.md): from the run file's lora: section, a PEFT
// adapter_config.json (--peft) or a PEFT adapter folder (--adapter), into TrainConfig::lora,
// and the refusals of what a LoRA run does not implement (exit 2 naming the setting).
#pragma once
#include <string>

#include "config/config.h"
#include "config/run_config.h"

namespace zt::config {

// Fills config.lora, lora_source and adapter from the run config (relative paths already
// resolved). BadInput when more than one of lora:, peft and adapter is given.
void apply_run_lora(const RunConfig& run, TrainConfig& config);

// Nothing left to refuse here: bias and modules_to_save need the model's shape and are
// checked by lora_model_options / lora_unit_specs. (ZeRO-Offload
// works: the frozen base's slices live where offload_param puts them, the adapters' state
// where offload_optimizer does.)
void check_lora_run(const TrainConfig& config);

// How a LoRA setting is named in messages: "run.yaml: lora.bias", or "FILE: bias" for a
// PEFT adapter_config.json.
std::string lora_setting_name(const TrainConfig& config, const std::string& peft_key);

}  // namespace zt::config
