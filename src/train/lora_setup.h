// A LoRA run's model (issue 20, docs/lora.md): the adapters' options from the run's
// LoraConfig, their starting values (PEFT's init or a PEFT adapter folder), and final/ as the
// PEFT adapter folder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/lora_adapter.h"
#include "model/lora_config.h"
#include "model/transformer.h"

namespace zt::train {

// The adapters' parameters (every layer's A and B), as a run with `lora` trains them.
int64_t lora_parameter_count(const model::ModelConfig& model, const model::LoraOptions& lora);

// The adapter unit's values: PEFT's init (A Kaiming-uniform or gaussian, B zero; seeded by
// `seed` and each tensor's name), the trained biases' copies from the base's files at
// `base_path` (empty: a preset, whose name-seeded init draws the base's values), then the
// tensors of `adapter` when given. Allocates the unit's parameters when it has none (ZeRO-3
// builds a unit whole to cut its slices).
void fill_adapter_unit(model::Transformer& model, model::Unit& unit, uint64_t seed, const model::LoraAdapter* adapter,
                       const std::string& base_path = "");

}  // namespace zt::train
