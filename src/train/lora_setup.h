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

// What a LoRA model trains, by elements (trained copies: the files' rows, no vocabulary
// padding), and the FLOPs per token MFU counts for it: the frozen base's (4 per weight: no
// weight gradients, + attention), + 6 per A/B element (their GEMMs forward, input and weight
// gradients), + 2 per element of a head's copy (its weight gradient; the head GEMM itself is
// the base's count). Trained biases and an embedding's copy are no GEMMs.
struct LoraTrained {
  int64_t adapters = 0;   // A and B
  int64_t copies = 0;     // trained biases and modules_to_save
  int64_t head_copy = 0;  // of which the head's
  double flops_per_token(const model::ModelConfig& model, int64_t T) const;
};
LoraTrained lora_trained(const model::ParameterRegistry& registry);

// The adapter unit's values: PEFT's init (A Kaiming-uniform or gaussian, B zero; seeded by
// `seed` and each tensor's name), the trained biases' copies from the base's files at
// `base_path` (empty: a preset, whose name-seeded init draws the base's values), then the
// tensors of `adapter` when given. Allocates the unit's parameters when it has none (ZeRO-3
// builds a unit whole to cut its slices).
void fill_adapter_unit(model::Transformer& model, model::Unit& unit, uint64_t seed, const model::LoraAdapter* adapter,
                       const std::string& base_path = "");

}  // namespace zt::train
