// PEFT adapter folders (PeftModel.save_pretrained):
//
//   adapter_config.json         model/lora_config.h
//   adapter_model.safetensors   the trainable tensors, named as the PeftModel's state dict
//                               with the adapter name ("default") dropped:
//     base_model.model.<module path>.lora_A.weight   [r, in]    e.g. <module path> =
//     base_model.model.<module path>.lora_B.weight   [out, r]   model.layers.3.self_attn.q_proj
//                                                                transformer.h.3.attn.c_attn
//     A and B have these shapes whatever the base's layout: with fan_in_fan_out (GPT-2's
//     Conv1D, weight [in, out]) PEFT transposes B @ A when it merges, not the factors
//     (peft/tuners/lora/layer.py, get_delta_weight).
//     bias "all": every bias of the model, a LoRA-wrapped layer's as
//       base_model.model.<module path>.base_layer.bias (others under their own names);
//     bias "lora_only": the adapted layers' biases (PEFT 0.12 looks for <module path>.bias
//       and so saves none of a wrapped layer; both spellings are read);
//     modules_to_save: the trained copy under the module's own name
//       (base_model.model.lm_head.weight: PEFT drops "modules_to_save.default").
//   The tensors may be f32, bf16 or f16; they are read as f32.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "model/registry.h"

namespace zt::model {

// Prefix of every key in adapter_model.safetensors (PeftModel.base_model.model).
constexpr const char* kPeftKeyPrefix = "base_model.model.";

// "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight" (which: 'A' or 'B').
std::string peft_lora_key(const ModelConfig& model, int64_t layer, const std::string& module, char which);
// The key PEFT saves a base tensor under (bias "all", modules_to_save): kPeftKeyPrefix + the
// HF name, with ".base_layer" before the last component when the tensor belongs to an adapted
// module (`wrapped`).
std::string peft_base_key(const std::string& hf_name, bool wrapped);

struct LoraFactors {
  int64_t layer = 0;
  LoraModule module;
  OwnedTensor a;  // f32 [r, in_features]
  OwnedTensor b;  // f32 [out_features, r]
};

struct LoraAdapter {
  LoraConfig config;
  std::vector<LoraModule> modules;  // resolved targets, lora_modules() order
  std::vector<LoraFactors> factors;  // layer-major: every layer's modules in that order
  // Base-model tensors the adapter replaces (trained biases, modules_to_save), under the
  // base's HF names (the PEFT prefix and ".base_layer" dropped), f32 in the file's shape.
  std::vector<std::pair<std::string, OwnedTensor>> replaced;
};

// Reads `dir` (adapter_config.json + adapter_model.safetensors) for a base model of shape
// `base`. BadInput naming the file and key: a missing or misshapen A/B (checked against the
// base: [r, in], [out, r]), a key that is no target of the config, a base tensor the config
// does not declare the adapter trains (not a bias under its bias setting, not a module of
// modules_to_save: all such keys named), a non-floating dtype, a folder with
// adapter_model.bin only (pickle: not read; convert it to safetensors).
// Unsupported: tensors of LoRA variants (DoRA's lora_magnitude_vector, embedding LoRA).
LoraAdapter load_lora_adapter(const std::string& dir, const ModelConfig& base);

// Writes `dir` (atomically, replacing it) as PeftModel.save_pretrained does:
// adapter_config.json (`config`, with fan_in_fan_out as PEFT sets it for the family: true for
// GPT-2's Conv1D, false otherwise) and adapter_model.safetensors holding every adapter unit's
// ("lora.<l>", model/lora.h) A and B under PEFT's keys, in f32 (PEFT keeps its adapters in
// f32; a 16-bit run's values widen exactly), plus the tokenizer files of `tokenizer_files`
// (as SavePretrainedOptions's: a Trainer's output folder has them beside the adapter).
// The registry's adapter units must hold their values (host or device).
void save_lora_adapter(const ParameterRegistry& registry, const ModelConfig& base, LoraConfig config,
                       const std::string& dir, const std::vector<std::string>& tokenizer_files = {});

}  // namespace zt::model
