// HF model directory -> a Transformer for inference (see inference_load.h).
#include "model/inference_load.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_file.h"
#include "model/hf_check.h"
#include "model/hf_weights.h"
#include "model/lora_adapter.h"
#include "model/lora_merge.h"
#include "ops/copy.h"

namespace zt::model {
namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  const std::string text = io::read_bounded_file(path.string(), "model config");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ZT_THROW_INPUT(path.string(), ": not valid JSON (", e.what(), ")");
  }
}

// eos_token_id may be an int, a list of ints or null.
void add_ids(std::vector<int32_t>& ids, const nlohmann::json& j, const std::string& source) {
  if (j.is_null()) return;
  if (j.is_number_integer()) {
    const int64_t id = j.get<int64_t>();
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(static_cast<int32_t>(id));
    return;
  }
  if (j.is_array()) {
    for (const auto& x : j) add_ids(ids, x, source);
    return;
  }
  ZT_THROW_INPUT(source, ": eos_token_id must be an integer or a list of integers");
}

}  // namespace

std::unique_ptr<Transformer> inference_copy(const Transformer& source, DType param_dtype, Device device) {
  ModelOptions o = source.options();
  o.param_dtype = param_dtype;
  o.device = device;
  o.allocate_grads = false;
  o.allocate_params = true;
  if (device.is_cpu()) o = host_staging_options(o);
  auto model = std::make_unique<Transformer>(source.config(), o);
  // Same config and shard_count: the same units with the same padding, so flat buffers
  // copy one to one (ops::copy converts the dtype on the way).
  for (size_t i = 0; i < source.registry().size(); ++i)
    ops::copy(model->registry().unit(i).flat_params(), source.registry().unit(i).flat_params());
  model->set_mode(Mode::Eval);
  return model;
}

InferenceModel load_for_inference(const std::string& dir, DType param_dtype, Device device,
                                  const std::string& adapter_dir) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  if (!fs::is_directory(root))
    ZT_THROW_INPUT("--model '", dir, "' is not a directory: give a HF model directory (config.json + safetensors)");
  const fs::path config_path = root / "config.json";
  if (!fs::exists(config_path))
    ZT_THROW_INPUT("'", dir, "' has no config.json: give a HF model directory (as save_pretrained writes it)");
  const nlohmann::json cj = read_json(config_path);
  InferenceModel m;
  m.config = config_from_hf_json(cj, config_path.string());
  // An adapter is merged in f32 on the host (read first: one that does not fit fails early).
  const bool merge = !adapter_dir.empty();
  std::unique_ptr<LoraAdapter> adapter;
  if (merge) adapter = std::make_unique<LoraAdapter>(load_lora_adapter(adapter_dir, m.config));
  const DType host_dtype = merge ? DType::F32 : param_dtype;
  ModelOptions o;
  o.param_dtype = host_dtype;
  o.allocate_grads = false;
  check_hf_config_against_weights(m.config, config_path.string(), dir);
  check_model_fits_host(m.config, static_cast<double>(dtype_size(host_dtype)), dir + ": the model's parameters");
  if (merge) {
    m.model = load_base_for_merge(dir, m.config, *adapter, o);
    m.config = m.model->config();  // untied when the adapter trains a tied head or embedding
    merge_lora_into(*m.model, *adapter, adapter_dir);
  } else {
    m.model = std::make_unique<Transformer>(m.config, o);
    load_hf_weights(m.model->registry(), m.config, dir);
  }
  m.model->set_mode(Mode::Eval);
  if (!device.is_cpu() || host_dtype != param_dtype) m.model = inference_copy(*m.model, param_dtype, device);

  const fs::path gen = root / "generation_config.json";
  if (fs::exists(gen)) {
    const nlohmann::json gj = read_json(gen);
    if (gj.contains("eos_token_id")) add_ids(m.eos_token_ids, gj["eos_token_id"], gen.string());
  }
  if (cj.contains("eos_token_id")) add_ids(m.eos_token_ids, cj["eos_token_id"], config_path.string());
  add_ids(m.eos_token_ids, m.config.eos_token_id, config_path.string());  // GPT-2's default 50256
  // Ids outside the vocabulary can never be generated.
  m.eos_token_ids.erase(std::remove_if(m.eos_token_ids.begin(), m.eos_token_ids.end(),
                                       [&](int32_t id) { return id >= m.config.vocab_size; }),
                        m.eos_token_ids.end());
  return m;
}

namespace {

ModelAndAdapter with_tokenizer(std::string model, std::string adapter) {
  namespace fs = std::filesystem;
  std::error_code ec;
  bool adapter_has_tokenizer = false;
  if (!adapter.empty())
    for (const char* name : {"tokenizer.json", "vocab.json", "tokenizer.model"})
      adapter_has_tokenizer = adapter_has_tokenizer || fs::is_regular_file(fs::path(adapter) / name, ec);
  std::string tokenizer = adapter_has_tokenizer ? adapter : model;
  return {std::move(model), std::move(adapter), std::move(tokenizer)};
}

}  // namespace

ModelAndAdapter resolve_model_and_adapter(const std::string& model, const std::string& adapter) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool adapter_folder = fs::is_regular_file(fs::path(model) / "adapter_config.json", ec) &&
                              !fs::exists(fs::path(model) / "config.json", ec);
  if (!adapter_folder) return with_tokenizer(model, adapter);
  if (!adapter.empty())
    ZT_THROW_INPUT("--model '", model, "' is a PEFT adapter folder and --adapter names '", adapter,
                   "'; give the base model as --model BASE and the adapter as --adapter DIR");
  const LoraConfig config = load_lora_config(model);
  const std::string base = config.base_model_name_or_path;
  if (base.empty() || !fs::is_regular_file(fs::path(base) / "config.json", ec))
    ZT_THROW_INPUT("--model '", model, "' is a PEFT adapter folder whose base_model_name_or_path (",
                   base.empty() ? std::string("null") : "'" + base + "'",
                   ") is no local HF model directory; give it as --model BASE --adapter ", model);
  return with_tokenizer(base, model);
}

}  // namespace zt::model
