// A LoRA run's adapters (see lora_setup.h).
#include "train/lora_setup.h"

#include <algorithm>

#include "core/error.h"
#include "model/hf_weights.h"
#include "ops/copy.h"

namespace zt::train {

int64_t lora_parameter_count(const model::ModelConfig& model, const model::LoraOptions& lora) {
  int64_t n = 0;
  for (int64_t l = 0; l < model.num_layers; ++l)
    for (const model::ParamSpec& s : model::lora_unit_specs(model, lora, l)) n += shape_numel(s.shape);
  for (const model::ParamSpec& s : model::lora_final_norm_specs(model, lora)) n += shape_numel(s.shape);
  for (const model::ParamSpec& s : model::lora_lm_head_specs(model, lora)) n += shape_numel(s.hf_shape);
  for (const model::ParamSpec& s : model::lora_token_embedding_specs(model, lora)) n += shape_numel(s.hf_shape);
  return n;
}

LoraTrained lora_trained(const model::ParameterRegistry& registry) {
  LoraTrained t;
  for (const auto& u : registry.units()) {
    if (u->frozen()) continue;
    for (const model::ParamEntry& e : u->params()) {
      if (!model::is_trained_base_copy(e.spec)) {
        t.adapters += e.numel();
        continue;
      }
      t.copies += shape_numel(e.spec.hf_shape);
      if (e.spec.field == model::Field::LmHead) t.head_copy += shape_numel(e.spec.hf_shape);
    }
  }
  return t;
}

double LoraTrained::flops_per_token(const model::ModelConfig& model, int64_t T) const {
  return model.flops_per_token(T, model::BaseWeights::Frozen) + 6.0 * static_cast<double>(adapters) +
         2.0 * static_cast<double>(head_copy);
}

namespace {

model::ParamEntry& entry_named(model::Unit& unit, const std::string& name) {
  const auto entry = std::find_if(unit.params().begin(), unit.params().end(),
                                  [&](const model::ParamEntry& e) { return e.name() == name; });
  ZT_CHECK(entry != unit.params().end(), "unit ", unit.name(), " has no ", name);
  return *entry;
}

// Converted on the host, then copied to where the unit lives.
void set_value(const model::ParamEntry& entry, const Tensor& value, DType dtype) {
  OwnedTensor staged(value.shape(), dtype);
  staged.view().copy_from(value);
  ops::copy(entry.value, staged);
}

// The trained copies (biases, modules_to_save) start at the base's values: read from the
// base's files (at ZeRO-3 the base units are not whole here), each from its source tensor
// (a tied head's copy: the token embedding). Without files (a preset) the copies' init
// seeded by that source's name already drew the base's values.
void fill_base_copies(const model::ModelConfig& config, model::Unit& unit, const std::string& base_path) {
  std::vector<model::ParamSpec> sources;
  std::vector<const model::ParamEntry*> copies;
  for (const model::ParamEntry& e : unit.params()) {
    if (!model::is_trained_base_copy(e.spec)) continue;
    model::ParamSpec source = e.spec;
    source.name = e.spec.value_source();
    sources.push_back(source);
    copies.push_back(&e);
  }
  if (copies.empty() || base_path.empty()) return;
  model::Unit files("base copies of " + unit.name(), sources, 1);
  files.set_storage(DType::F32, DType::F32, Device::cpu());
  files.allocate_params(DType::F32, Device::cpu());
  model::load_hf_unit_slice(config, base_path, files, 0, files.flat_params());
  for (size_t i = 0; i < copies.size(); ++i) set_value(*copies[i], files.params()[i].value, unit.param_dtype());
}

}  // namespace

void fill_adapter_unit(model::Transformer& model, model::Unit& unit, uint64_t seed, const model::LoraAdapter* adapter,
                       const std::string& base_path) {
  ZT_CHECK(model::is_lora_unit(unit), "fill_adapter_unit on ", unit.name());
  if (!unit.has_params()) unit.allocate_params(unit.param_dtype(), unit.device());
  model.init_unit_weights(unit, seed);
  fill_base_copies(model.config(), unit, base_path);
  if (adapter == nullptr) return;
  // The adapter's trained biases (PEFT's bias all / lora_only keys, read under the base's names).
  for (const auto& [name, value] : adapter->replaced)
    for (const model::ParamEntry& e : unit.params())
      if (model::is_trained_base_copy(e.spec) && e.name() == name) {
        // The file's rows (an embedding-sized head's padding rows stay as they are).
        const int64_t hf_numel = shape_numel(e.spec.hf_shape);
        if (value.view().numel() != hf_numel)
          ZT_THROW_INPUT(name, " in the adapter has ", value.view().numel(), " elements, the base's ", hf_numel);
        model::ParamEntry rows = e;
        rows.value = e.value.narrow(0, 0, e.spec.hf_shape[0]);
        set_value(rows, value.view().reshape(e.spec.hf_shape), unit.param_dtype());
      }
  const int64_t layer = model::lora_unit_layer(unit);
  if (layer < 0) return;  // a unit of trained copies only
  for (const model::LoraFactors& f : adapter->factors) {
    if (f.layer != layer) continue;
    const std::string module = model::lora_module_path(model.config(), layer, f.module.name);
    for (const auto& [which, value] : {std::make_pair("A", &f.a), std::make_pair("B", &f.b)}) {
      const std::string name = module + ".lora_" + which + ".weight";
      set_value(entry_named(unit, name), value->view(), unit.param_dtype());
    }
  }
}

}  // namespace zt::train
