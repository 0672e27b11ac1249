// Reading PEFT adapter folders (see lora_adapter.h for the names).
#include "model/lora_adapter.h"
#include "core/strings.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/staging_dir.h"
#include "model/hf_names.h"
#include "model/hf_tokenizer_files.h"
#include "model/lora.h"
#include "ops/copy.h"

namespace zt::model {
namespace {

namespace fs = std::filesystem;

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

OwnedTensor read_f32(const io::SafetensorsReader& file, const std::string& key) {
  const io::TensorInfo& info = file.info(key);
  if (!info.supported || !is_floating(info.dtype))
    ZT_THROW_INPUT(file.path(), ": tensor ", key, " has dtype ", info.dtype_name,
                   "; adapter tensors must be F32, BF16 or F16");
  OwnedTensor out(info.shape, DType::F32);
  out.view().copy_from(file.tensor(key));
  return out;
}

// PEFT's module rule: `module` is `target` or ends with "." + target.
bool module_matches(const std::string& module, const std::string& target) {
  return module == target || (module.size() > target.size() + 1 && ends_with(module, target) &&
                              module[module.size() - target.size() - 1] == '.');
}

// Whether adapter_config.json declares that the adapter trains the base tensor `name` (an
// HF name): a bias under bias "all" (every bias) or "lora_only" (an adapted module's), or
// a tensor of a module of modules_to_save.
bool declared_replacement(const LoraAdapter& adapter, const ModelConfig& base, const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string module = dot == std::string::npos ? name : name.substr(0, dot);
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  for (const std::string& m : adapter.config.modules_to_save)
    if (module_matches(module, m)) return true;
  if (leaf != "bias") return false;
  if (adapter.config.bias == LoraBias::All) return true;
  if (adapter.config.bias == LoraBias::LoraOnly)
    for (int64_t l = 0; l < base.num_layers; ++l)
      for (const LoraModule& m : adapter.modules)
        if (lora_module_path(base, l, m.name) == module) return true;
  return false;
}

}  // namespace

std::string peft_lora_key(const ModelConfig& model, int64_t layer, const std::string& module, char which) {
  return std::string(kPeftKeyPrefix) + lora_module_path(model, layer, module) + ".lora_" + which + ".weight";
}

std::string peft_base_key(const std::string& hf_name, bool wrapped) {
  if (!wrapped) return kPeftKeyPrefix + hf_name;
  const size_t dot = hf_name.rfind('.');
  return kPeftKeyPrefix + hf_name.substr(0, dot) + ".base_layer" + hf_name.substr(dot);
}

LoraAdapter load_lora_adapter(const std::string& dir, const ModelConfig& base) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    ZT_THROW_INPUT(dir,
                   ": not an adapter folder (PEFT's save_pretrained writes a folder with adapter_config.json "
                   "and adapter_model.safetensors)");
  const std::string weights = dir + "/adapter_model.safetensors";
  if (!fs::is_regular_file(weights, ec)) {
    if (fs::is_regular_file(dir + "/adapter_model.bin", ec))
      ZT_THROW_INPUT(dir,
                     ": has adapter_model.bin only (a pickle, which zerotrain does not read); save it with "
                     "safe_serialization=True, or convert: safetensors.torch.save_file(torch.load(...), "
                     "'adapter_model.safetensors')");
    ZT_THROW_INPUT(weights, ": missing; a PEFT adapter folder holds adapter_model.safetensors");
  }
  LoraAdapter adapter;
  adapter.config = load_lora_config(dir);
  const std::string config_file = dir + "/adapter_config.json";
  adapter.modules = resolve_lora_targets(adapter.config, base, config_file);

  // Every expected A/B key -> its place in `factors`.
  std::map<std::string, std::pair<size_t, char>> expected;
  for (int64_t l = 0; l < base.num_layers; ++l)
    for (const LoraModule& m : adapter.modules) {
      expected[peft_lora_key(base, l, m.name, 'A')] = {adapter.factors.size(), 'A'};
      expected[peft_lora_key(base, l, m.name, 'B')] = {adapter.factors.size(), 'B'};
      LoraFactors f;
      f.layer = l;
      f.module = m;
      adapter.factors.push_back(std::move(f));
    }

  const io::SafetensorsReader file(weights);
  const int64_t r = adapter.config.r;
  std::vector<std::string> undeclared;
  for (const std::string& key : file.names()) {
    if (key.find("lora_magnitude_vector") != std::string::npos || key.find("lora_embedding_") != std::string::npos)
      ZT_THROW_UNSUPPORTED(weights, ": tensor ", key,
                           " belongs to a LoRA variant zerotrain does not implement "
                           "(DoRA or LoRA on embeddings)");
    const auto it = expected.find(key);
    if (it != expected.end()) {
      LoraFactors& f = adapter.factors[it->second.first];
      const bool is_a = it->second.second == 'A';
      const Shape want = is_a ? Shape{r, f.module.in_features} : Shape{f.module.out_features(), r};
      if (file.info(key).shape != want)
        ZT_THROW_INPUT(weights, ": tensor ", key, " has shape ", shape_text(file.info(key).shape), ", expected ",
                       shape_text(want), " (r = ", r, " from adapter_config.json and the base's ", f.module.name,
                       "); is the adapter for another base model?");
      (is_a ? f.a : f.b) = read_f32(file, key);
      continue;
    }
    if (ends_with(key, ".lora_A.weight") || ends_with(key, ".lora_B.weight"))
      ZT_THROW_INPUT(weights, ": tensor ", key, " is not a module adapter_config.json's target_modules picks in a ",
                     base.model_type, " model of ", base.num_layers, " layers; is the adapter for another base model?");
    if (key.rfind(kPeftKeyPrefix, 0) != 0)
      ZT_THROW_INPUT(weights, ": tensor ", key, " does not start with '", kPeftKeyPrefix,
                     "' as PEFT's keys do (LoRA A/B, trained biases or modules_to_save)");
    std::string name = key.substr(std::string(kPeftKeyPrefix).size());
    const size_t wrapped = name.find(".base_layer.");
    if (wrapped != std::string::npos) name.erase(wrapped, std::string(".base_layer").size());
    // A base tensor the config does not say the adapter trains would replace a base weight
    // silently: named below, all at once.
    if (!declared_replacement(adapter, base, name)) {
      undeclared.push_back(key);
      continue;
    }
    adapter.replaced.emplace_back(name, read_f32(file, key));
  }
  if (!undeclared.empty()) {
    std::string list;
    for (size_t i = 0; i < undeclared.size() && i < 8; ++i) list += (i ? ", " : "") + undeclared[i];
    if (undeclared.size() > 8) list += str(", ... (", undeclared.size(), " in all)");
    ZT_THROW_INPUT(
        weights, ": tensor", undeclared.size() == 1 ? " " : "s ", list,
        " would replace base weights, but adapter_config.json (bias \"", lora_bias_name(adapter.config.bias),
        "\", modules_to_save ",
        adapter.config.modules_to_save.empty() ? std::string("none") : join(adapter.config.modules_to_save, ", "),
        ") does not declare ", undeclared.size() == 1 ? "it" : "them",
        ": declare the module in modules_to_save (or the bias setting) if the adapter really trains it, "
        "or remove the tensor");
  }
  for (const LoraFactors& f : adapter.factors)
    for (char which : {'A', 'B'})
      if (!(which == 'A' ? f.a : f.b)->has_data())
        ZT_THROW_INPUT(weights, ": tensor ", peft_lora_key(base, f.layer, f.module.name, which),
                       " is missing; adapter_config.json's target_modules picks ", f.module.name, " in every layer");
  return adapter;
}

void save_lora_adapter(const ParameterRegistry& registry, const ModelConfig& base, LoraConfig config,
                       const std::string& dir, const std::vector<std::string>& tokenizer_files) {
  // PEFT corrects the flag to the base's layout (with a warning) when it wraps the layers.
  config.fan_in_fan_out = hf_name_table(base.family).linear_layout == WeightLayout::InOut;
  std::vector<TokenizerFiles> tokenizers;  // resolved first: a broken one fails before writing
  for (const std::string& t : tokenizer_files)
    tokenizers.push_back(tokenizer_files_for(t, base.max_position_embeddings));

  std::vector<io::TensorSource> tensors;
  for (const auto& unit : registry.units()) {
    if (!is_lora_unit(*unit)) continue;
    ZT_CHECK(unit->has_params(), "save_lora_adapter: the parameters of unit ", unit->name(), " are not in place");
    for (const ParamEntry& e : unit->params()) {
      if (lora_held_copy(*unit, e.spec, config.bias)) continue;  // not trained: PEFT has no such key
      // A trained head copy: its file rows (without the vocabulary padding).
      const Tensor value = is_trained_base_copy(e.spec) ? e.value.narrow(0, 0, e.spec.hf_shape[0]) : e.value;
      // The unit's names are PEFT's without its prefix (lora_unit_specs); a trained bias is
      // the base's tensor, under ".base_layer" when an adapter wraps its linear.
      const std::string key = is_trained_base_copy(e.spec)
                                  ? peft_base_key(e.name(), wrapped_by_adapter(*unit, e.name()))
                                  : kPeftKeyPrefix + e.name();
      tensors.push_back({key, DType::F32, value.shape(), [value](void* dst) {
                           OwnedTensor host(value.shape(), value.dtype());
                           ops::copy(host, value);  // from the device when it lives there
                           Tensor(dst, value.shape(), DType::F32).copy_from(host);
                         }});
    }
  }
  ZT_CHECK(!tensors.empty(), "save_lora_adapter: the model has no adapter units");

  io::StagingDir staging(dir);
  io::write_safetensors(staging.file("adapter_model.safetensors"), tensors, {{"format", "pt"}});
  save_lora_config(config, staging.file("adapter_config.json"));
  for (const TokenizerFiles& t : tokenizers) {
    for (const auto& [src, name] : t.copies) io::copy_file_atomic(src, staging.file(name));
    for (const auto& [name, text] : t.written)
      io::write_file_atomic(staging.file(name), [&](std::FILE* f) {
        if (std::fwrite(text.data(), 1, text.size(), f) != text.size())
          ZT_THROW_IO(staging.file(name), ": write failed");
      });
  }
  // Files of the old folder that are not part of an adapter (a README, notes) are kept,
  // as save_pretrained keeps them in a model directory.
  const bool writes_tokenizer = !tokenizers.empty();
  staging.commit([writes_tokenizer](const std::string& name) {
    const bool adapter_output = name.rfind("adapter_model", 0) == 0 || name == "adapter_config.json";
    return !adapter_output && !(writes_tokenizer && is_tokenizer_file_name(name));
  });
}

}  // namespace zt::model
