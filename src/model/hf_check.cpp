#include "model/hf_check.h"

#include <cctype>
#include <map>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/memory_info.h"
#include "io/safetensors.h"
#include "model/hf_names.h"
#include "model/hf_weights.h"
#include "model/transformer.h"

namespace zt::model {
namespace {

// The layer index of "transformer.h.3.attn..." / "model.layers.3.mlp...", or -1.
int64_t layer_index(const std::string& name) {
  for (const std::string key : {"h.", "layers."}) {
    for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
      if (at != 0 && name[at - 1] != '.') continue;
      size_t i = at + key.size(), j = i;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      if (j == i || j >= name.size() || name[j] != '.' || j - i > 9) continue;
      return std::stoll(name.substr(i, j - i));
    }
  }
  return -1;
}

}  // namespace

void check_hf_config_against_weights(const ModelConfig& config, const std::string& config_source,
                                     const std::string& weights) {
  std::vector<std::unique_ptr<io::SafetensorsReader>> readers;
  for (const auto& f : hf_weight_files(weights)) readers.push_back(std::make_unique<io::SafetensorsReader>(f));
  std::map<std::string, const io::SafetensorsReader*> where;
  int64_t layers = 0;
  for (const auto& r : readers) {
    for (const std::string& name : r->names()) {
      where.emplace(name, r.get());
      layers = std::max(layers, layer_index(name) + 1);
    }
  }
  // The layer count bounds the registry built below (one unit per layer). Fewer layers
  // than the files hold is allowed (a truncated model: the load warns about the unused
  // tensors); more would be allocated and then found missing.
  if (layers > 0 && config.num_layers > layers)
    ZT_THROW_INPUT(config_source, ": the config has ", config.num_layers, " layers (",
                   hf_name_table(config.family).layers_key, ") but the weights in ", weights, " hold ", layers,
                   "; the config.json does not belong to these weights");
  // Shapes from the headers, through a registry that allocates nothing.
  ModelOptions o;
  o.allocate_params = false;
  o.allocate_grads = false;
  o.device = Device::cpu();
  const Transformer shell(config, o);
  shell.registry().for_each([&](const Unit&, const ParamEntry& e) {
    auto it = where.find(e.name());
    const std::string& prefix = hf_name_table(config.family).legacy_prefix;
    if (it == where.end() && !prefix.empty() && e.name().rfind(prefix, 0) == 0)
      it = where.find(e.name().substr(prefix.size()));  // old hub files (the original gpt2's)
    if (it == where.end()) return;                      // missing tensors are reported by the load, with the whole list
    const HfTensorLayout l = hf_layout(config, e.spec);
    const Shape& got = it->second->info(it->first).shape;
    if (got != l.shape)
      ZT_THROW_INPUT(config_source, ": the config gives tensor '", it->first, "' shape ", shape_str(l.shape), " but ",
                     it->second->path(), " holds ", shape_str(got),
                     "; the config.json does not match its weights (check hidden_size, intermediate_size, "
                     "vocab_size, heads)");
  });
}

void check_model_fits_host(const ModelConfig& config, double bytes_per_param, const std::string& what) {
  check_fits_host_memory(config.num_parameters_f64() * bytes_per_param, what);
}

}  // namespace zt::model
