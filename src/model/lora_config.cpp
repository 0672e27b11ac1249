// PEFT's LoraConfig <-> adapter_config.json, and target_modules against a family's linears.
#include "model/lora_config.h"
#include "core/strings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/bounded_file.h"
#include "io/safetensors.h"
#include "model/hf_names.h"
#include "model/weights.h"

namespace zt::model {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A value PEFT writes for a feature that is off: null, false, {}, [] (or "").
bool is_nothing(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_object() && v.empty()) ||
         (v.is_array() && v.empty()) || (v.is_string() && v.get<std::string>().empty());
}

[[noreturn]] void refuse(const std::string& source, const std::string& key, const json& value, const std::string& why) {
  ZT_THROW_INPUT(source, ": ", key, " = ", value.dump(), " is not supported by zerotrain's LoRA (", why,
                 "); remove it or set it to PEFT's default");
}

std::vector<std::string> string_list(const json& v, const std::string& source, const std::string& key) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array()) ZT_THROW_INPUT(source, ": ", key, " must be a list of module names (got ", v.dump(), ")");
  for (const json& e : v) {
    if (!e.is_string() || e.get<std::string>().empty())
      ZT_THROW_INPUT(source, ": ", key, " must hold non-empty strings (got ", e.dump(), ")");
    out.push_back(e.get<std::string>());
  }
  return out;
}

double number(const json& v, const std::string& source, const std::string& key) {
  if (!v.is_number()) ZT_THROW_INPUT(source, ": ", key, " must be a number (got ", v.dump(), ")");
  return v.get<double>();
}

// Keys read for their meaning; the rest of PEFT's keys are inert or refused below.
// Keys that change the math unless they hold their default ("nothing"): refused otherwise.
const std::map<std::string, std::string>& math_keys() {
  static const std::map<std::string, std::string> keys = {
      {"use_dora", "DoRA's magnitude vector"},
      {"lora_bias", "a bias on lora_B"},
      {"use_qalora", "QALoRA's pooled input"},
      {"layers_to_transform", "LoRA on some layers only"},
      {"rank_pattern", "per-module ranks"},
      {"alpha_pattern", "per-module alphas"},
      {"target_parameters", "LoRA on nn.Parameter targets"},
      {"exclude_modules", "excluded modules"},
      {"layer_replication", "replicated layers"},
      {"megatron_config", "Megatron parallel linears"},
      {"trainable_token_indices", "trainable token embeddings"},
      {"alora_invocation_tokens", "activated LoRA"},
      {"arrow_config", "Arrow routing"},
      {"use_bdlora", "block-diagonal LoRA"},
      {"loftq_config", "LoftQ's quantized base"},
      {"ensure_weight_tying", "tied modules_to_save"},
  };
  return keys;
}
// Keys without effect on the adapter's math here.
const std::set<std::string>& inert_keys() {
  static const std::set<std::string> keys = {
      "inference_mode", "revision",     "auto_mapping",   "megatron_core", "qalora_group_size", "peft_version",
      "layers_pattern",                                    // only read with layers_to_transform
      "eva_config",     "corda_config", "lora_ga_config",  // only read with their init_lora_weights
  };
  return keys;
}

LoraBias parse_bias(const json& v, const std::string& source) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "none") return LoraBias::None;
    if (s == "all") return LoraBias::All;
    if (s == "lora_only") return LoraBias::LoraOnly;
  }
  ZT_THROW_INPUT(source, ": bias must be \"none\", \"all\" or \"lora_only\" (got ", v.dump(), ")");
}

LoraInit parse_init(const json& v, const std::string& source) {
  if (v.is_boolean() && v.get<bool>()) return LoraInit::Default;
  if (v.is_string() && v.get<std::string>() == "gaussian") return LoraInit::Gaussian;
  refuse(source, "init_lora_weights", v,
         "supported: true (A Kaiming-uniform, B zero) and \"gaussian\"; false, PiSSA, OLoRA, LoftQ, EVA and "
         "CorDA initializations are not implemented");
}

bool suffix_match(const std::string& path, const std::string& target) {
  if (path == target) return true;
  return path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
         path[path.size() - target.size() - 1] == '.';
}

}  // namespace

double LoraConfig::scaling() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
}

void LoraConfig::validate(const std::string& source) const {
  if (r <= 0) ZT_THROW_INPUT(source, ": r must be a positive integer (got ", r, ")");
  // Before any size is computed from it: r * (in + out) per module must not overflow (a
  // rank of 2^63-1 corrupted the heap; 2^58 wrapped to "0 adapter parameters"). The
  // model's own bound (r at most the smaller side of every adapted layer) is checked in
  // resolve_lora_targets, once the model is known.
  if (r > kMaxLoraRank)
    ZT_THROW_INPUT(source, ": r ", r, " is larger than any layer a LoRA adapter can have (at most ", kMaxLoraRank,
                   "); ranks are typically 4 to 256");
  if (!(lora_alpha > 0) || !std::isfinite(lora_alpha))
    ZT_THROW_INPUT(source, ": lora_alpha must be positive (got ", lora_alpha, ")");
  // scaling = alpha / r (or / sqrt(r)) multiplies the adapter's output in float: a finite
  // float, far from overflow.
  if (lora_alpha > kMaxLoraAlpha)
    ZT_THROW_INPUT(source, ": lora_alpha ", lora_alpha, " is too large (at most ", kMaxLoraAlpha,
                   "; the scaling alpha / r multiplies every adapter output); typical values are r to 2r");
  if (!(lora_dropout >= 0 && lora_dropout < 1))
    ZT_THROW_INPUT(source, ": lora_dropout must be in [0, 1) (got ", lora_dropout, ")");
  if (target_form == LoraTargetForm::Names && target_modules.empty())
    ZT_THROW_INPUT(source,
                   ": target_modules is empty; name the modules to adapt (e.g. [\"q_proj\", \"v_proj\"]) "
                   "or \"all-linear\"");
  if (target_form == LoraTargetForm::Regex && target_regex.empty())
    ZT_THROW_INPUT(source, ": target_modules is an empty regular expression");
}

const char* lora_bias_name(LoraBias bias) {
  switch (bias) {
    case LoraBias::All:
      return "all";
    case LoraBias::LoraOnly:
      return "lora_only";
    case LoraBias::None:
      break;
  }
  return "none";
}

LoraConfig lora_config_from_peft_json(const json& j, const std::string& source) {
  if (!j.is_object()) ZT_THROW_INPUT(source, ": expected a JSON object (PEFT's adapter_config.json)");
  const auto peft_type = j.find("peft_type");
  if (peft_type == j.end() || !peft_type->is_string() || peft_type->get<std::string>() != "LORA")
    ZT_THROW_INPUT(source, ": peft_type must be \"LORA\" (got ",
                   peft_type == j.end() ? std::string("nothing") : peft_type->dump(),
                   "); zerotrain reads LoRA adapters only");
  LoraConfig c;
  for (const auto& [key, value] : j.items()) {
    if (key == "peft_type") continue;
    if (key == "task_type") {
      if (!value.is_null() && !(value.is_string() && value.get<std::string>() == "CAUSAL_LM"))
        ZT_THROW_INPUT(source, ": task_type ", value.dump(),
                       " is not supported; zerotrain trains causal language models (task_type \"CAUSAL_LM\")");
    } else if (key == "r") {
      if (!value.is_number_integer()) ZT_THROW_INPUT(source, ": r must be an integer (got ", value.dump(), ")");
      // Above INT64_MAX the JSON value is unsigned and would wrap to a negative rank.
      c.r = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                ? INT64_MAX
                : value.get<int64_t>();
    } else if (key == "lora_alpha") {
      c.lora_alpha = number(value, source, key);
    } else if (key == "lora_dropout") {
      c.lora_dropout = number(value, source, key);
    } else if (key == "target_modules") {
      if (value.is_string()) {
        const std::string s = value.get<std::string>();
        c.target_form = s == "all-linear" ? LoraTargetForm::AllLinear : LoraTargetForm::Regex;
        if (c.target_form == LoraTargetForm::Regex) c.target_regex = s;
      } else if (value.is_null()) {
        ZT_THROW_INPUT(source,
                       ": target_modules is null; PEFT fills it from its per-model defaults, zerotrain "
                       "needs it named (e.g. [\"q_proj\", \"v_proj\"] or \"all-linear\")");
      } else {
        c.target_modules = string_list(value, source, key);
      }
    } else if (key == "bias") {
      c.bias = parse_bias(value, source);
    } else if (key == "use_rslora") {
      if (!value.is_boolean()) ZT_THROW_INPUT(source, ": use_rslora must be true or false");
      c.use_rslora = value.get<bool>();
    } else if (key == "init_lora_weights") {
      c.init_lora_weights = parse_init(value, source);
    } else if (key == "modules_to_save") {
      c.modules_to_save = string_list(value, source, key);
    } else if (key == "fan_in_fan_out") {
      if (!value.is_boolean()) ZT_THROW_INPUT(source, ": fan_in_fan_out must be true or false");
      c.fan_in_fan_out = value.get<bool>();
    } else if (key == "base_model_name_or_path") {
      if (value.is_string())
        c.base_model_name_or_path = value.get<std::string>();
      else if (!value.is_null())
        ZT_THROW_INPUT(source, ": base_model_name_or_path must be a string or null");
    } else if (const auto math = math_keys().find(key); math != math_keys().end()) {
      if (!is_nothing(value)) refuse(source, key, value, math->second + " is not implemented");
    } else if (inert_keys().count(key) == 0 && !is_nothing(value)) {
      refuse(source, key, value, "a key this version does not know, with a value that may change the adapter");
    }
  }
  if (j.find("r") == j.end()) c.r = 8;  // PEFT's default
  c.validate(source);
  return c;
}

// PEFT 0.12's keys only: PEFT up to 0.12 builds LoraConfig(**file) and fails with a
// TypeError on a key it does not know (corda_config, eva_config, exclude_modules, lora_bias,
// qalora_group_size, target_parameters, trainable_token_indices, use_qalora came later),
// while later versions fill every missing key with its default, which is what those keys
// would say here. So the file loads in every PEFT from 0.12 on
// (tools/peft_load_check.py).
json lora_config_to_peft_json(const LoraConfig& c) {
  json j;
  j["alpha_pattern"] = json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = c.base_model_name_or_path.empty() ? json(nullptr) : json(c.base_model_name_or_path);
  j["bias"] = lora_bias_name(c.bias);
  j["fan_in_fan_out"] = c.fan_in_fan_out;
  j["inference_mode"] = true;
  j["init_lora_weights"] = c.init_lora_weights == LoraInit::Gaussian ? json("gaussian") : json(true);
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = json::object();
  // Python writes an int alpha as an int (PEFT's own files have "lora_alpha": 16).
  if (c.lora_alpha == std::floor(c.lora_alpha) && std::fabs(c.lora_alpha) < 1e15)
    j["lora_alpha"] = static_cast<int64_t>(c.lora_alpha);
  else
    j["lora_alpha"] = c.lora_alpha;
  j["lora_dropout"] = c.lora_dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = c.modules_to_save.empty() ? json(nullptr) : json(c.modules_to_save);
  j["peft_type"] = "LORA";
  j["r"] = c.r;
  j["rank_pattern"] = json::object();
  j["revision"] = nullptr;
  switch (c.target_form) {
    case LoraTargetForm::AllLinear:
      j["target_modules"] = "all-linear";
      break;
    case LoraTargetForm::Regex:
      j["target_modules"] = c.target_regex;
      break;
    case LoraTargetForm::Names:
      j["target_modules"] = c.target_modules;
      break;
  }
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = c.use_rslora;
  return j;
}

LoraConfig load_lora_config(const std::string& path) {
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? path + "/adapter_config.json" : path;
  // Only a missing file is "no such file": a device (/dev/null), FIFO or directory is named
  // as what it is by the bounded reader below.
  if (!fs::exists(file, ec))
    ZT_THROW_INPUT(file,
                   ": no such file; a PEFT adapter folder holds adapter_config.json and "
                   "adapter_model.safetensors (PeftModel.save_pretrained)");
  json j;
  try {
    j = json::parse(io::read_bounded_file(file, "adapter config"));
  } catch (const json::exception& e) {
    ZT_THROW_INPUT(file, ": not valid JSON (", e.what(), ")");
  }
  return lora_config_from_peft_json(j, file);
}

void save_lora_config(const LoraConfig& config, const std::string& path) {
  const std::string text = lora_config_to_peft_json(config).dump(2);
  io::write_file_atomic(path, [&](std::FILE* f) {
    if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) ZT_THROW_IO(path, ": write failed");
  });
}

std::vector<LoraModule> lora_modules(const ModelConfig& m) {
  // The block's linear weights (its 2-D parameters), one module per HF tensor, in registry
  // order: the weights table gives the shapes, the family's name table the names. A packed
  // field's tensors (q, k, v; gate, up) cover its rows one after another.
  const std::string prefix = hf_block_prefix(hf_name_table(m.family), 0);
  const std::string suffix = ".weight";
  std::vector<LoraModule> modules;
  Field field{};
  int64_t row = 0;
  for_each_weight(m, UnitKind::Block, 0, [&](const ParamSpec& s) {
    if (s.shape.size() != 2) return;
    ZT_CHECK(starts_with(s.name, prefix) && ends_with(s.name, suffix), "lora_modules: ", s.name,
             " is not a block module's weight");
    if (modules.empty() || s.field != field) row = 0;
    field = s.field;
    const bool in_out = s.layout == WeightLayout::InOut;
    const int64_t out = in_out ? s.shape[1] : s.shape[0], in = in_out ? s.shape[0] : s.shape[1];
    const std::string name = s.name.substr(prefix.size(), s.name.size() - prefix.size() - suffix.size());
    modules.push_back({name, s.field, row, row + out, in});
    row += out;
  });
  return modules;
}

std::string lora_module_path(const ModelConfig& m, int64_t layer, const std::string& module) {
  return hf_block_prefix(hf_name_table(m.family), layer) + module;
}

std::vector<std::string> lora_target_names(const ModelConfig& m) {
  const std::vector<LoraModule> modules = lora_modules(m);
  const auto last = [](const std::string& name) { return name.substr(name.find('.') + 1); };
  std::vector<std::string> names;
  for (const LoraModule& mod : modules)
    if (std::find(names.begin(), names.end(), last(mod.name)) == names.end()) names.push_back(last(mod.name));
  // A last component two modules share (GPT-2's c_proj): the two-component names pick one.
  for (const LoraModule& mod : modules) {
    const auto same = [&](const LoraModule& o) { return last(o.name) == last(mod.name); };
    if (std::count_if(modules.begin(), modules.end(), same) > 1) names.push_back(mod.name);
  }
  return names;
}

std::vector<LoraModule> resolve_lora_targets(const LoraConfig& c, const ModelConfig& m, const std::string& source) {
  const std::vector<LoraModule> modules = lora_modules(m);
  // Whether target picks `path` (PEFT's check_target_module_exists for each form).
  std::regex pattern;
  if (c.target_form == LoraTargetForm::Regex) {
    try {
      pattern = std::regex(c.target_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      ZT_THROW_INPUT(source, ": target_modules \"", c.target_regex, "\" is not a regular expression zerotrain reads (",
                     e.what(), "); give a list of module names instead");
    }
  }
  auto picks = [&](const std::string& path, const std::string& name) {
    return c.target_form == LoraTargetForm::Regex ? std::regex_match(path, pattern) : suffix_match(path, name);
  };

  if (c.target_form == LoraTargetForm::Names) {
    for (const std::string& t : c.target_modules) {
      if (t == "lm_head" || t == "embed_tokens" || t == "wte")
        ZT_THROW_INPUT(source, ": target_modules names ", t,
                       ", which zerotrain does not adapt with LoRA (linear layers of the blocks only: ",
                       join(lora_target_names(m), ", "), "); train it in full with modules_to_save instead");
      bool found = false;
      for (int64_t l = 0; l < m.num_layers && !found; ++l)
        for (const LoraModule& mod : modules) found = found || suffix_match(lora_module_path(m, l, mod.name), t);
      if (!found)
        ZT_THROW_INPUT(source, ": target_modules names '", t, "', which a ", m.model_type,
                       " model does not have; its linear layers are ", join(lora_target_names(m), ", "),
                       " (query_key_value and dense are GPT-NeoX/BLOOM names)");
    }
  } else if (c.target_form == LoraTargetForm::Regex && std::regex_match(std::string("lm_head"), pattern)) {
    ZT_THROW_INPUT(source, ": target_modules \"", c.target_regex,
                   "\" matches lm_head, which zerotrain does not adapt with LoRA");
  }

  std::vector<LoraModule> out;
  for (const LoraModule& mod : modules) {
    int64_t layers = 0;
    for (int64_t l = 0; l < m.num_layers; ++l) {
      const std::string path = lora_module_path(m, l, mod.name);
      bool hit = c.target_form == LoraTargetForm::AllLinear;
      for (size_t i = 0; !hit && i < std::max<size_t>(1, c.target_modules.size()); ++i)
        hit = picks(path, c.target_modules.empty() ? std::string() : c.target_modules[i]);
      layers += hit ? 1 : 0;
    }
    if (layers == 0) continue;
    if (layers != m.num_layers)
      ZT_THROW_INPUT(source, ": target_modules picks ", mod.name, " in ", layers, " of ", m.num_layers,
                     " layers; LoRA on some layers only (layers_to_transform) is not implemented: name the "
                     "module without its layer index (e.g. '",
                     mod.name.substr(mod.name.find('.') + 1), "')");
    out.push_back(mod);
  }
  if (out.empty())
    ZT_THROW_INPUT(source, ": target_modules \"", c.target_regex, "\" matches none of the model's linear layers (",
                   lora_module_path(m, 0, modules[0].name), ", ...)");
  // PEFT builds any positive r, and adapters it trained must load: past min(in, out) the
  // product B A is a full-rank matrix that W itself could hold, so a larger r only adds
  // parameters. Said once per layer kind, with the largest useful r (kMaxLoraRank, checked
  // when the config is read, keeps sizes far from overflow).
  for (const LoraModule& mod : out) {
    const int64_t smaller = std::min(mod.in_features, mod.out_features());
    if (c.r > smaller)
      ZT_WARN(source, ": r ", c.r, " is larger than ", mod.name, "'s smaller dimension (", mod.in_features, " in, ",
              mod.out_features(), " out); an update of rank ", smaller,
              " already spans the whole layer, the rest only adds parameters (PEFT accepts it too)");
  }
  return out;
}

}  // namespace zt::model
