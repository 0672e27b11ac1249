// LoRA's settings, as PEFT's LoraConfig holds them and its adapter_config.json stores them,
// and which of a model's linear layers they adapt.
//
// A LoRA-adapted linear W [out, in] computes y = W x + scaling * B (A dropout(x)) with
// A [r, in], B [out, r] (PEFT's shapes, whatever the base's file layout) and
// scaling = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora.
//
// adapter_config.json (PEFT's save_pretrained: json.dumps(indent=2, sort_keys=True)):
// every key PEFT 0.17+ writes is read; keys whose values change the math and that zerotrain
// does not implement (use_dora true, layers_to_transform, rank_pattern / alpha_pattern
// non-empty, target_parameters, lora_bias true, PiSSA/OLoRA/LoftQ/EVA/CorDA inits, ...) are
// BadInput naming the key; keys that are inert here (inference_mode, revision,
// megatron_core, ...) are accepted. A key this reader does not know is accepted only when
// it holds a "nothing" value (null, false, {} or []), as a newer PEFT's default would.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/config.h"
#include "model/field.h"

namespace zt::model {

enum class LoraBias { None, All, LoraOnly };  // PEFT's bias: "none" | "all" | "lora_only"
enum class LoraInit {
  Default,   // init_lora_weights true: A Kaiming-uniform (a = sqrt(5)), B zero
  Gaussian,  // "gaussian": A normal with std 1/r, B zero
};
// How target_modules was given: a list of module names (each matching a module path equal
// to it or ending in "." + it), "all-linear" (every linear layer but the LM head), or any
// other string: a regular expression the whole module path must match (re.fullmatch).
enum class LoraTargetForm { Names, AllLinear, Regex };

// Bounds checked before any size is computed from the settings: no layer has a side of
// more than 2^24, and alpha / r must stay a modest float.
inline constexpr int64_t kMaxLoraRank = int64_t{1} << 24;
inline constexpr double kMaxLoraAlpha = 1e6;

struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0.0;
  LoraTargetForm target_form = LoraTargetForm::Names;
  std::vector<std::string> target_modules;  // Names
  std::string target_regex;                 // Regex
  LoraBias bias = LoraBias::None;
  bool use_rslora = false;
  LoraInit init_lora_weights = LoraInit::Default;
  std::vector<std::string> modules_to_save;  // trained in full and saved (e.g. "lm_head")
  // The base stores its linears as [in, out] (GPT-2's Conv1D). Only the merge reads it (it
  // transposes B @ A); A and B keep PEFT's shapes either way. PEFT sets it for GPT-2.
  bool fan_in_fan_out = false;
  std::string base_model_name_or_path;  // written as null when empty

  double scaling() const;
  // Throws BadInput naming `source` and the setting (0 < r <= kMaxLoraRank, 0 < alpha <=
  // kMaxLoraAlpha, 0 <= dropout < 1, some target).
  void validate(const std::string& source) const;
};

// PEFT's adapter_config.json object -> LoraConfig. `source` names the file in errors.
LoraConfig lora_config_from_peft_json(const nlohmann::json& j, const std::string& source);
// The object PEFT 0.17's LoraConfig.save_pretrained writes (every key, PEFT's defaults for
// those zerotrain does not use, peft_type LORA, task_type CAUSAL_LM, inference_mode true).
nlohmann::json lora_config_to_peft_json(const LoraConfig& config);
// Reads a file (dir/adapter_config.json when `path` is a directory).
LoraConfig load_lora_config(const std::string& path);
// Writes `path` atomically as PEFT does (indent 2, keys sorted).
void save_lora_config(const LoraConfig& config, const std::string& path);

// One adaptable linear module of a family, as PEFT names it.
struct LoraModule {
  std::string name;  // the module path below a block: "self_attn.q_proj", "attn.c_attn", "mlp.c_proj"
  Field field;       // the field holding its weight
  // Rows of the field's logical [out, in] matrix the module covers: a packed field is several
  // PEFT modules (Llama's q/k/v: [0, Hq*D), [Hq*D, (Hq+Hkv)*D), [(Hq+Hkv)*D, (Hq+2Hkv)*D);
  // gate/up: [0, F), [F, 2F)); GPT-2's c_attn is one module over all of QkvWeight's rows.
  int64_t row_begin = 0, row_end = 0;
  int64_t in_features = 0;  // A is [r, in_features]
  int64_t out_features() const { return row_end - row_begin; }  // B is [out_features, r]
};

// The family's adaptable linear modules in a block, in the model's order (GPT-2: attn.c_attn,
// attn.c_proj, mlp.c_fc, mlp.c_proj; Llama/Mistral/Qwen2: self_attn.q_proj, k_proj, v_proj,
// o_proj, mlp.gate_proj, up_proj, down_proj).
std::vector<LoraModule> lora_modules(const ModelConfig& model);
// The full module path of a block module as transformers names it (named_modules()):
// "transformer.h.3.attn.c_attn", "model.layers.3.self_attn.q_proj".
std::string lora_module_path(const ModelConfig& model, int64_t layer, const std::string& module);
// The names a target list may use for this family (the last path components and the
// two-component forms: "c_proj", "attn.c_proj", ...), for messages.
std::vector<std::string> lora_target_names(const ModelConfig& model);

// The modules config.target_modules adapts, in lora_modules() order, each in every layer.
// BadInput (naming `source`) for a listed name the model does not have (listing those it
// has: the guides' query_key_value is GPT-NeoX/BLOOM naming), a regex that does not
// compile or matches nothing, the LM head (LoRA on lm_head is not implemented) and a target
// that picks some layers only (as layers_to_transform would), and an r larger than an
// adapted layer's smaller dimension.
std::vector<LoraModule> resolve_lora_targets(const LoraConfig& config, const ModelConfig& model,
                                             const std::string& source);

const char* lora_bias_name(LoraBias bias);  // "none" | "all" | "lora_only"

}  // namespace zt::model
