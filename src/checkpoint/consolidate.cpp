#include "checkpoint/consolidate.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/bounded_file.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/lora.h"
#include "model/lora_adapter.h"
#include "model/transformer.h"
#include "ops/elementwise.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_validate.h"

namespace zt::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json_file(const std::string& path, const std::string& what) {
  const std::string text = io::read_bounded_file(path, what);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    ZT_THROW_INPUT("'", path, "' is not valid JSON: ", e.what());
  }
}

// The model config: --config when given, else the one the checkpoint recorded.
model::ModelConfig model_config(const CheckpointManifest& m, const std::string& config_path) {
  if (!config_path.empty()) {
    std::error_code ec;
    if (fs::is_directory(config_path, ec)) return model::load_hf_config(config_path);
    return model::config_from_hf_json(read_json_file(config_path, "model config"), config_path);
  }
  if (m.model_config.is_null())
    ZT_THROW_INPUT("'", m.path,
                   "' has no extra.model_config (a checkpoint saved before zerotrain recorded it): "
                   "give the model's HF config with --config DIR|config.json");
  return model::config_from_hf_json(m.model_config, m.path + " (extra.model_config)");
}

// A file the run recorded in the manifest's extra (its tokenizer, its source model's
// generation_config.json), when it is still there; "" otherwise (said once).
std::string recorded_file(const CheckpointManifest& m, const char* key, const char* flag) {
  if (!m.extra.is_object() || !m.extra.contains(key) || !m.extra.at(key).is_string()) return "";
  const std::string path = m.extra.at(key).get<std::string>();
  std::error_code ec;
  if (fs::exists(path, ec)) return path;
  ZT_WARN(m.path, ": the run's ", key, " '", path, "' is gone; the output has none",
          flag[0] ? std::string(" (give one with ") + flag + ")" : std::string());
  return "";
}

}  // namespace

ConsolidateSummary consolidate_checkpoint(const std::string& checkpoint, const std::string& out,
                                          const ConsolidateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (!is_floating(options.dtype))
    ZT_THROW_INPUT("consolidate: the output dtype is f32, bf16 or f16 (got ", dtype_name(options.dtype), ")");
  std::error_code ec;
  // resolve_checkpoint's own message is about --resume; say what consolidate wants.
  if (!fs::exists(fs::path(checkpoint) / "manifest.json", ec) && !fs::exists(fs::path(checkpoint) / "latest", ec))
    ZT_THROW_INPUT("'", checkpoint,
                   "' is not a checkpoint: give a checkpoint directory (global_stepN, holding "
                   "manifest.json) or a checkpoint root (holding `latest`, e.g. OUTPUT_DIR/checkpoints)");
  ConsolidateSummary summary;
  summary.checkpoint_dir = resolve_checkpoint(checkpoint);
  if (fs::exists(out, ec) && fs::equivalent(out, summary.checkpoint_dir, ec))
    ZT_THROW_INPUT("consolidate: the output directory '", out, "' is the checkpoint itself; choose another");
  const CheckpointManifest m = read_checkpoint_manifest(summary.checkpoint_dir);
  summary.step = m.step;
  summary.world_size = m.world_size;

  // The skeleton holds the weights in the output dtype: one copy of the model, no grads.
  const model::ModelConfig config = model_config(m, options.config_path);
  model::ModelOptions mo;
  mo.param_dtype = options.dtype;
  mo.allocate_grads = false;
  // A LoRA run's checkpoint holds its adapters alone (the base is model.path's): the result
  // is the PEFT adapter folder, as the run's final/ (adapter tensors in f32).
  std::optional<model::LoraConfig> lora;
  if (m.extra.is_object() && m.extra.contains("lora")) {
    lora = model::lora_config_from_peft_json(m.extra.at("lora"), m.path + " (extra.lora)");
    mo.lora = model::lora_model_options(*lora, config, m.path + " (extra.lora)");
    mo.param_dtype = DType::F32;
    mo.allocate_params = false;  // the base is not in the checkpoint: only the adapters are built
  }
  model::Transformer model(config, mo);
  if (lora)
    for (auto& u : model.registry().units())
      if (!u->frozen()) u->allocate_params(DType::F32, Device::cpu());
  check_manifest_layout(m, model.registry(),
                        " (a checkpoint of another model? with --config, is it this checkpoint's config?)");
  check_shards_present(m);  // a missing one fails before any work
  std::vector<std::unique_ptr<io::SafetensorsReader>> shards;
  for (int r = 0; r < m.world_size; ++r) shards.push_back(std::make_unique<io::SafetensorsReader>(m.shard_path(r)));

  // fp32 master weights are the exact weights of a 16-bit run (zero_to_fp32 reads them
  // too); when the output has the run's own dtype the parameters are those bytes already.
  bool use_master = (lora ? DType::F32 : options.dtype) != m.param_dtype;
  for (const ManifestUnit& u : m.units) {
    if (lora && u.name.rfind("lora.", 0) != 0) continue;  // the frozen base: not in the checkpoint
    use_master = use_master && std::find(m.optimizer_state.begin(), m.optimizer_state.end(), u.name + ".master") !=
                                   m.optimizer_state.end();
  }
  summary.source = use_master ? "master" : "params";

  model::ParameterRegistry& registry = model.registry();
  for (size_t i = 0; i < registry.size(); ++i) {
    model::Unit& unit = registry.unit(i);
    if (unit.frozen()) continue;
    const ManifestUnit& mu = m.units[i];
    const std::string name = unit.name() + "." + summary.source;
    const int64_t part = mu.part;
    const Tensor flat = unit.flat_params();
    for (int r = 0; r < m.world_size; ++r) {
      const Tensor src = checked_shard_tensor(m, *shards[static_cast<size_t>(r)], name, r);
      // Rank r holds [r*part, (r+1)*part); the tail past numel is the saving run's padding.
      const int64_t begin = r * part;
      const int64_t n = std::min(part, unit.numel() - begin);
      if (n <= 0) continue;
      check_loaded_finite(m.shard_path(r), name, src.narrow(0, 0, n));
      flat.narrow(0, begin, n).copy_from(src.narrow(0, 0, n));
    }
    // Finite weights may still overflow a narrower output dtype (f32 beyond f16's 65504):
    // no file of inf weights is written.
    for (const model::ParamEntry& p : unit.params())
      if (!ops::all_finite(p.value))
        ZT_THROW_INPUT("consolidate: parameter '", p.name(), "' of ", summary.checkpoint_dir, " overflows ",
                       dtype_name(options.dtype),
                       " (values beyond its range become Inf); nothing was written: "
                       "consolidate with --dtype bf16 or f32");
    if (options.on_unit) options.on_unit({i, registry.size(), unit.name(), summary.source, unit.numel()});
  }

  if (lora) {
    std::vector<std::string> tokenizer_files = options.tokenizer_files;
    if (tokenizer_files.empty())
      if (std::string t = recorded_file(m, "tokenizer", "--tokenizer"); !t.empty()) tokenizer_files.push_back(t);
    registry.for_each([&](const model::Unit& u, const model::ParamEntry& e) {
      if (u.frozen()) return;
      summary.parameters += e.value.numel();
      summary.bytes += static_cast<uint64_t>(e.value.numel()) * sizeof(float);
    });
    model::save_lora_adapter(registry, config, *lora, out, tokenizer_files);
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return summary;
  }
  registry.for_each([&](const model::Unit&, const model::ParamEntry& e) {
    const int64_t n = shape_numel(model::hf_layout(config, e.spec).shape);
    summary.parameters += n;
    summary.bytes += static_cast<uint64_t>(n) * dtype_size(options.dtype);
  });
  model::SavePretrainedOptions so;
  so.dtype = options.dtype;
  so.max_shard_size = options.max_shard_size;
  so.tokenizer_files = options.tokenizer_files;
  // Without --tokenizer: the run's own tokenizer, as its final/ has it.
  if (so.tokenizer_files.empty())
    if (std::string t = recorded_file(m, "tokenizer", "--tokenizer"); !t.empty()) so.tokenizer_files.push_back(t);
  so.generation_config = recorded_file(m, "generation_config", "");
  model::save_pretrained(model, out, so);  // its staging removes dead exports' leftovers
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace zt::checkpoint
