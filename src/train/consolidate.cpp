#include "train/consolidate.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/transformer.h"
#include "train/checkpoint.h"

namespace zt::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The parts of manifest.json that consolidation uses, read once with every key checked.
struct ManifestParam {
  std::string name;
  int64_t offset = 0;
  Shape shape;
};
struct ManifestUnit {
  std::string name;
  int64_t numel = 0;
  int64_t padded_numel = 0;
  std::vector<ManifestParam> params;
};
struct Manifest {
  std::string path;
  int world_size = 1;
  int64_t step = 0;
  DType param_dtype = DType::F32;
  std::vector<ManifestUnit> units;
  std::set<std::string> optimizer_state;
  json model_config;  // null when the checkpoint has none
};

json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) ZT_THROW_INPUT("cannot read ", what, " '", path, "'");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    ZT_THROW_INPUT("'", path, "' is not valid JSON: ", e.what());
  }
}

Manifest read_manifest(const std::string& dir) {
  Manifest m;
  m.path = (fs::path(dir) / "manifest.json").string();
  const json j = read_json_file(m.path, "checkpoint manifest");
  if (!j.is_object() || j.value("format", "") != "zerotrain-checkpoint")
    ZT_THROW_INPUT("'", m.path, "' is not a zerotrain checkpoint manifest (no \"format\": \"zerotrain-checkpoint\")");
  // A hand-edited or truncated manifest must be a clear error, not a json exception.
  try {
    m.world_size = j.value("world_size", 1);
    m.step = j.value("step", int64_t{0});
    m.param_dtype = parse_dtype(j.value("param_dtype", std::string("f32")));
    for (const json& ju : j.at("units")) {
      ManifestUnit u;
      u.name = ju.at("name").get<std::string>();
      u.numel = ju.at("numel").get<int64_t>();
      u.padded_numel = ju.at("padded_numel").get<int64_t>();
      for (const json& jp : ju.at("params"))
        u.params.push_back({jp.at("name").get<std::string>(), jp.at("offset").get<int64_t>(),
                            jp.at("shape").get<Shape>()});
      m.units.push_back(std::move(u));
    }
    for (const json& s : j.value("optimizer_state", json::array())) m.optimizer_state.insert(s.get<std::string>());
    const json extra = j.value("extra", json::object());
    if (extra.is_object() && extra.contains("model_config")) m.model_config = extra.at("model_config");
  } catch (const json::exception& e) {
    ZT_THROW_INPUT("'", m.path, "' is malformed (", e.what(), "); was it edited by hand or truncated?");
  }
  if (m.world_size < 1) ZT_THROW_INPUT("'", m.path, "': world_size ", m.world_size, " must be at least 1");
  for (const ManifestUnit& u : m.units)
    if (u.padded_numel < u.numel || u.padded_numel % m.world_size != 0)
      ZT_THROW_INPUT("'", m.path, "': unit '", u.name, "' has padded_numel ", u.padded_numel,
                     ", which is not a multiple of world_size ", m.world_size, " of at least numel ", u.numel);
  return m;
}

// The model config: --config when given, else the one the checkpoint recorded.
model::ModelConfig model_config(const Manifest& m, const std::string& config_path) {
  if (!config_path.empty()) {
    std::error_code ec;
    if (fs::is_directory(config_path, ec)) return model::load_hf_config(config_path);
    return model::config_from_hf_json(read_json_file(config_path, "model config"), config_path);
  }
  if (m.model_config.is_null())
    ZT_THROW_INPUT("'", m.path, "' has no extra.model_config (a checkpoint saved before zerotrain recorded it): "
                   "give the model's HF config with --config DIR|config.json");
  return model::config_from_hf_json(m.model_config, m.path + " (extra.model_config)");
}

// The manifest's unit layout must be the skeleton's (padding may differ: it depends on the
// world size). Names the first difference.
void check_layout(const Manifest& m, const model::ParameterRegistry& registry) {
  const char* hint = " (a checkpoint of another model? with --config, is it this checkpoint's config?)";
  if (m.units.size() != registry.size())
    ZT_THROW_INPUT(m.path, ": the checkpoint has ", m.units.size(), " units, the model of its config has ",
                   registry.size(), hint);
  for (size_t i = 0; i < registry.size(); ++i) {
    const model::Unit& u = *registry.units()[i];
    const ManifestUnit& mu = m.units[i];
    if (mu.name != u.name() || mu.numel != u.numel() || mu.params.size() != u.params().size())
      ZT_THROW_INPUT(m.path, ": unit ", i, " is '", mu.name, "' with ", mu.numel, " elements in ", mu.params.size(),
                     " parameters; the model has '", u.name(), "' with ", u.numel(), " in ", u.params().size(), hint);
    for (size_t k = 0; k < mu.params.size(); ++k) {
      const ManifestParam& mp = mu.params[k];
      const model::ParamEntry& p = u.params()[k];
      if (mp.name != p.name() || mp.offset != p.offset || mp.shape != p.spec.shape)
        ZT_THROW_INPUT(m.path, ": unit '", mu.name, "' parameter ", k, " is ", mp.name, " ", shape_str(mp.shape),
                       " at offset ", mp.offset, "; the model has ", p.name(), " ", shape_str(p.spec.shape),
                       " at offset ", p.offset, hint);
    }
  }
}

std::string shard_file(int rank) { return "shard_rank" + std::to_string(rank) + ".safetensors"; }

// Every rank's shard, opened (memory-mapped) up front so that a missing one fails before
// any work.
std::vector<std::unique_ptr<io::SafetensorsReader>> open_shards(const std::string& dir, int world_size) {
  std::vector<std::unique_ptr<io::SafetensorsReader>> shards;
  for (int r = 0; r < world_size; ++r) {
    const fs::path p = fs::path(dir) / shard_file(r);
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      ZT_THROW_INPUT("checkpoint '", dir, "' is missing rank ", r, "'s shard ", shard_file(r), " (it was saved by ",
                     world_size, " ranks; copy every rank's shard_rank<r>.safetensors into the directory)");
    shards.push_back(std::make_unique<io::SafetensorsReader>(p.string()));
  }
  return shards;
}

// Rank r's slice of one flat buffer: 1-D, `part` elements of `dtype`.
Tensor shard_slice(const io::SafetensorsReader& shard, const std::string& name, DType dtype, int64_t part) {
  if (!shard.contains(name))
    ZT_THROW_INPUT("'", shard.path(), "' has no tensor '", name, "' (an incomplete shard, or not from this manifest?)");
  const io::TensorInfo& info = shard.info(name);
  if (!info.supported || info.dtype != dtype || info.shape != Shape{part})
    ZT_THROW_INPUT("'", shard.path(), "': tensor '", name, "' is ", info.dtype_name, " ", shape_str(info.shape),
                   "; the manifest says ", dtype_name(dtype), " [", part, "] (shards of another checkpoint mixed in?)");
  return shard.tensor(name);
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
    ZT_THROW_INPUT("'", checkpoint, "' is not a checkpoint: give a checkpoint directory (global_stepN, holding "
                   "manifest.json) or a checkpoint root (holding `latest`, e.g. OUTPUT_DIR/checkpoints)");
  ConsolidateSummary summary;
  summary.checkpoint_dir = resolve_checkpoint(checkpoint);
  if (fs::exists(out, ec) && fs::equivalent(out, summary.checkpoint_dir, ec))
    ZT_THROW_INPUT("consolidate: the output directory '", out, "' is the checkpoint itself; choose another");
  const Manifest m = read_manifest(summary.checkpoint_dir);
  summary.step = m.step;
  summary.world_size = m.world_size;

  // The skeleton holds the weights in the output dtype: one copy of the model, no grads.
  const model::ModelConfig config = model_config(m, options.config_path);
  model::ModelOptions mo;
  mo.param_dtype = options.dtype;
  mo.allocate_grads = false;
  model::Transformer model(config, mo);
  check_layout(m, model.registry());
  const auto shards = open_shards(summary.checkpoint_dir, m.world_size);

  // fp32 master weights are the exact weights of a 16-bit run (zero_to_fp32 reads them
  // too); when the output has the run's own dtype the parameters are those bytes already.
  bool use_master = options.dtype != m.param_dtype;
  for (const ManifestUnit& u : m.units) use_master = use_master && m.optimizer_state.count(u.name + ".master") != 0;
  summary.source = use_master ? "master" : "params";
  const DType source_dtype = use_master ? DType::F32 : m.param_dtype;

  model::ParameterRegistry& registry = model.registry();
  for (size_t i = 0; i < registry.size(); ++i) {
    model::Unit& unit = registry.unit(i);
    const ManifestUnit& mu = m.units[i];
    const std::string name = unit.name() + "." + summary.source;
    const int64_t part = mu.padded_numel / m.world_size;
    const Tensor flat = unit.flat_params();
    for (int r = 0; r < m.world_size; ++r) {
      const Tensor src = shard_slice(*shards[static_cast<size_t>(r)], name, source_dtype, part);
      // Rank r holds [r*part, (r+1)*part); the tail past numel is the saving run's padding.
      const int64_t begin = r * part;
      const int64_t n = std::min(part, unit.numel() - begin);
      if (n > 0) flat.narrow(0, begin, n).copy_from(src.narrow(0, 0, n));
    }
    if (options.on_unit) options.on_unit({i, registry.size(), unit.name(), summary.source, unit.numel()});
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
  model::save_pretrained(model, out, so);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace zt::train
