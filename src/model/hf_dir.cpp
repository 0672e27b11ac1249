#include "model/hf_dir.h"
#include "core/strings.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_file.h"
#include "io/safetensors.h"
#include "io/staging_dir.h"
#include "model/hf_check.h"
#include "model/hf_tokenizer_files.h"
#include "model/hf_weights.h"

namespace zt::model {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::BF16:
      return "bfloat16";
    case DType::F16:
      return "float16";
    default:
      return "float32";
  }
}

// Entries of an old model directory that a new save replaces or makes stale.
bool is_model_output(const std::string& name) {
  return name == "config.json" || name == "generation_config.json" || name == "model.safetensors.index.json" ||
         (starts_with(name, "model") && ends_with(name, ".safetensors")) ||
         (starts_with(name, "pytorch_model") && (ends_with(name, ".bin") || ends_with(name, ".bin.index.json")));
}

void write_text_atomic(const std::string& path, const std::string& text) {
  io::write_file_atomic(path, [&](std::FILE* f) {
    if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) ZT_THROW_IO(path, ": write failed");
  });
}

void write_json_atomic(const std::string& path, const json& j) { write_text_atomic(path, j.dump(2) + "\n"); }

std::string read_file(const std::string& path) { return io::read_bounded_file(path, "model config"); }

}  // namespace

uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, i), &used);
    if (used != i) throw std::invalid_argument("number");
  } catch (const std::exception&) {
    ZT_THROW_INPUT(what, ": '", text, "' is not a size (examples: 5GB, 500MB, 2GiB, 1000000)");
  }
  // huggingface_hub's parse_size: decimal units (GB = 1e9); binary ones accepted too.
  double mult = 0;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  else if (unit == "KIB")
    mult = 1024.0;
  else if (unit == "MIB")
    mult = 1024.0 * 1024;
  else if (unit == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "TIB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    ZT_THROW_INPUT(what, ": unknown unit '", text.substr(i), "' in '", text, "' (use B, KB, MB, GB, KiB, MiB, GiB)");
  const double bytes = value * mult;
  if (!(bytes >= 1) || bytes > 1e18) ZT_THROW_INPUT(what, ": size '", text, "' must be at least 1 byte");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string shard_file_name(int index, int count) {
  if (count == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", index + 1, count);
  return buf;
}

ModelConfig load_hf_config(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    ZT_THROW_INPUT(dir, ": not a model directory (expected a directory with config.json and model.safetensors)");
  const std::string path = dir + "/config.json";
  if (!fs::exists(path, ec))
    ZT_THROW_INPUT(path, ": missing; a HF model directory needs config.json (save it with save_pretrained)");
  return load_hf_config_file(path);
}

ModelConfig load_hf_config_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    ZT_THROW_INPUT(path, ": no such file; model.config names a HF config.json (as save_pretrained writes it)");
  if (!fs::is_regular_file(path, ec))
    ZT_THROW_INPUT(path, ": not a regular file (",
                   fs::is_directory(path, ec) ? "a directory" : "a device, FIFO or socket",
                   "); model.config names a HF config.json (as save_pretrained writes it)");
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    ZT_THROW_INPUT(path, ": not valid JSON (", e.what(), ")");
  }
  return config_from_hf_json(j, path);
}

Pretrained load_pretrained(const std::string& dir, ModelOptions options) {
  Pretrained p;
  p.config = load_hf_config(dir);
  check_hf_config_against_weights(p.config, dir + "/config.json", dir);
  if (options.device.is_cpu() && options.allocate_params)
    check_model_fits_host(p.config,
                          static_cast<double>(dtype_size(options.param_dtype)) +
                              (options.allocate_grads ? static_cast<double>(dtype_size(options.grad_dtype)) : 0.0),
                          dir + ": the model's parameters" + (options.allocate_grads ? " and gradients" : ""));
  p.model = std::make_unique<Transformer>(p.config, options);
  load_hf_weights(p.model->registry(), p.config, dir);
  return p;
}

void save_pretrained(const Transformer& model, const std::string& dir, const SavePretrainedOptions& o) {
  if (!is_floating(o.dtype))
    ZT_THROW_INPUT(dir, ": weights are saved in f32, bf16 or f16 (got ", dtype_name(o.dtype), ")");
  if (o.max_shard_size == 0) ZT_THROW_INPUT(dir, ": max_shard_size must be positive");
  const ModelConfig& config = model.config();

  // Resolve the tokenizer files first: a missing or broken one fails before anything is
  // written. The last source wins a name two of them share.
  std::vector<TokenizerFiles> tokenizers;
  for (const std::string& t : o.tokenizer_files)
    tokenizers.push_back(tokenizer_files_for(t, config.max_position_embeddings));

  // The tensors in model order with their file bytes, then cut into shards.
  struct Item {
    const ParamEntry* entry;
    HfTensorLayout layout;
    uint64_t bytes;
  };
  std::vector<Item> items;
  uint64_t total_size = 0;
  int64_t total_params = 0;
  model.registry().for_each([&](const Unit& unit, const ParamEntry& e) {
    ZT_CHECK(unit.has_params(), "save_pretrained: parameters of unit ", unit.name(), " are not allocated");
    HfTensorLayout l = hf_layout(config, e.spec);
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(l.shape)) * dtype_size(o.dtype);
    total_size += bytes;
    total_params += shape_numel(l.shape);
    items.push_back({&e, std::move(l), bytes});
  });
  std::vector<std::vector<const Item*>> shards(1);
  uint64_t current = 0;
  for (const Item& it : items) {
    if (!shards.back().empty() && current + it.bytes > o.max_shard_size) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&it);
    current += it.bytes;
  }
  const int n = static_cast<int>(shards.size());

  io::StagingDir staging(dir);
  json weight_map = json::object();
  for (int s = 0; s < n; ++s) {
    const std::string name = shard_file_name(s, n);
    std::vector<io::TensorSource> sources;
    for (const Item* it : shards[s]) {
      const ParamSpec* spec = &it->entry->spec;
      const Tensor value = it->entry->value;
      const Shape shape = it->layout.shape;
      const DType dtype = o.dtype;
      sources.push_back({it->layout.name, dtype, shape, [&config, spec, value, shape, dtype](void* dst) {
                           to_hf_layout(config, *spec, value, Tensor(dst, shape, dtype));
                         }});
      weight_map[it->layout.name] = name;
    }
    io::write_safetensors(staging.file(name), sources, {{"format", "pt"}});
  }
  if (n > 1) {
    json index = {{"metadata", {{"total_parameters", total_params}, {"total_size", total_size}}},
                  {"weight_map", weight_map}};
    write_json_atomic(staging.file("model.safetensors.index.json"), index);
  }
  json cj = config_to_hf_json(config);
  cj["torch_dtype"] = torch_dtype_name(o.dtype);
  write_json_atomic(staging.file("config.json"), cj);
  if (!o.generation_config.empty()) {
    io::copy_file_atomic(o.generation_config, staging.file("generation_config.json"));
  } else {
    json gen = {{"_from_model_config", true}};
    if (config.bos_token_id >= 0) gen["bos_token_id"] = config.bos_token_id;
    if (config.eos_token_id >= 0) gen["eos_token_id"] = cj["eos_token_id"];  // the list, when there is one
    write_json_atomic(staging.file("generation_config.json"), gen);
  }
  for (const TokenizerFiles& t : tokenizers) {
    for (const auto& [src, name] : t.copies) io::copy_file_atomic(src, staging.file(name));
    for (const auto& [name, text] : t.written) write_text_atomic(staging.file(name), text);
  }
  const bool writes_tokenizer = !tokenizers.empty();
  staging.commit([writes_tokenizer](const std::string& name) {
    return !is_model_output(name) && !(writes_tokenizer && is_tokenizer_file_name(name));
  });
}

}  // namespace zt::model
