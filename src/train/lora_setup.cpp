// A LoRA run's adapters (see lora_setup.h).
#include "train/lora_setup.h"

#include <algorithm>

#include "core/error.h"
#include "ops/copy.h"

namespace zt::train {

int64_t lora_parameter_count(const model::ModelConfig& model, const model::LoraOptions& lora) {
  int64_t n = 0;
  for (int64_t l = 0; l < model.num_layers; ++l)
    for (const model::ParamSpec& s : model::lora_unit_specs(model, lora, l)) n += shape_numel(s.shape);
  return n;
}

void fill_adapter_unit(model::Transformer& model, model::Unit& unit, uint64_t seed, const model::LoraAdapter* adapter) {
  ZT_CHECK(model::is_lora_unit(unit), "fill_adapter_unit on ", unit.name());
  if (!unit.has_params()) unit.allocate_params(unit.param_dtype(), unit.device());
  model.init_unit_weights(unit, seed);
  if (adapter == nullptr) return;
  const int64_t layer = std::stoll(unit.name().substr(unit.name().find('.') + 1));
  for (const model::LoraFactors& f : adapter->factors) {
    if (f.layer != layer) continue;
    const std::string module = model::lora_module_path(model.config(), layer, f.module.name);
    for (const auto& [which, value] : {std::make_pair("A", &f.a), std::make_pair("B", &f.b)}) {
      const std::string name = module + ".lora_" + which + ".weight";
      const auto entry = std::find_if(unit.params().begin(), unit.params().end(),
                                      [&](const model::ParamEntry& e) { return e.name() == name; });
      ZT_CHECK(entry != unit.params().end(), "unit ", unit.name(), " has no ", name);
      // Converted on the host, then copied to where the unit lives.
      OwnedTensor staged(value->view().shape(), unit.param_dtype());
      staged.view().copy_from(value->view());
      ops::copy(entry->value, staged);
    }
  }
}

}  // namespace zt::train
