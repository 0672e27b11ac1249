// LoRA adapters (see lora.h): target resolution over the weights table, the adapter unit's
// parameters, and the adapters handed to the parallel linear (parallel/linear.h) by field.
#include "model/lora.h"
#include "core/strings.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "model/hf_names.h"
#include "model/weights.h"

namespace zt::model {
namespace {

bool is_linear_weight(Field f) {
  return f == Field::QkvWeight || f == Field::AttnOutWeight || f == Field::MlpInWeight || f == Field::MlpOutWeight;
}

bool is_bias(Field f) {
  return f == Field::Norm1Bias || f == Field::QkvBias || f == Field::AttnOutBias || f == Field::Norm2Bias ||
         f == Field::MlpInBias || f == Field::MlpOutBias || f == Field::FinalNormBias;
}

// The linear whose output a bias field adds to.
Field linear_of_bias(Field bias) {
  switch (bias) {
    case Field::QkvBias:
      return Field::QkvWeight;
    case Field::AttnOutBias:
      return Field::AttnOutWeight;
    case Field::MlpInBias:
      return Field::MlpInWeight;
    case Field::MlpOutBias:
      return Field::MlpOutWeight;
    default:
      return bias;  // a norm's: no linear
  }
}

std::string module_of(const std::string& tensor_name) {
  for (const std::string suffix : {".weight", ".bias"})
    if (tensor_name.size() > suffix.size() && ends_with(tensor_name, suffix))
      return tensor_name.substr(0, tensor_name.size() - suffix.size());
  return tensor_name;
}

// A trained copy of a base tensor: the base's spec (same name, so a preset's name-seeded
// init gives the base's values), packed after the previous copy of its field.
ParamSpec trained_copy(const ParamSpec& base, bool packed_after_previous) {
  ParamSpec s = base;
  s.placement = packed_after_previous ? ParamSpec::Placement::Packed : ParamSpec::Placement::Aligned;
  return s;
}

// PEFT's rule: the whole path, or a suffix after a dot.
bool matches(const std::string& module, const std::string& target) {
  if (target == "all-linear" || module == target) return true;
  return module.size() > target.size() + 1 &&
         module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

// Every linear module of block `layer` with its rows, in table order.
std::vector<LoraTarget> block_linears(const ModelConfig& c, int64_t layer) {
  std::vector<LoraTarget> out;
  std::vector<int64_t> next_row(kFieldCount, 0);
  for (const ParamSpec& s : unit_specs(c, UnitKind::Block, layer)) {
    if (!is_linear_weight(s.field)) continue;
    const bool in_out = s.layout == WeightLayout::InOut;
    LoraTarget t;
    t.field = s.field;
    t.module = module_of(s.name);
    t.rows = in_out ? s.shape[1] : s.shape[0];
    t.in_features = in_out ? s.shape[0] : s.shape[1];
    int64_t& row = next_row[static_cast<size_t>(s.field)];
    t.row_begin = row;
    row += t.rows;
    out.push_back(t);
  }
  for (LoraTarget& t : out) t.field_rows = next_row[static_cast<size_t>(t.field)];
  return out;
}

// A run file's section is named "<file>: lora" (its keys "lora.<key>"); a PEFT file is the
// file itself ("<file>: <key>").
std::string setting_name(const std::string& source, const std::string& key) {
  return ends_with(source, ": lora") ? source + "." + key : source + ": " + key;
}

}  // namespace

LoraOptions lora_model_options(const LoraConfig& lora, const ModelConfig& model, const std::string& source) {
  LoraOptions o;
  o.r = lora.r;
  o.scaling = static_cast<float>(lora.scaling());
  o.dropout = static_cast<float>(lora.lora_dropout);
  o.init = lora.init_lora_weights == LoraInit::Gaussian ? AdapterInit::Gaussian : AdapterInit::KaimingUniform;
  o.bias = lora.bias;
  // The modules that can be saved, by their HF module paths ("model.embed_tokens", "lm_head").
  const std::string embedding = module_of(unit_specs(model, UnitKind::Embed).front().name);
  const std::pair<SavedModule, std::string> saveable[] = {{SavedModule::TokenEmbedding, embedding},
                                                          {SavedModule::LmHead, "lm_head"}};
  for (const std::string& m : lora.modules_to_save) {
    // PEFT's rule: a module whose path is the name or ends with "." + the name.
    const auto* found = std::find_if(std::begin(saveable), std::end(saveable),
                                     [&](const auto& s) { return m != "all-linear" && matches(s.second, m); });
    if (found == std::end(saveable))
      ZT_THROW_INPUT(setting_name(source, "modules_to_save"), ": '", m, "' is not implemented for training: a ",
                     family_name(model.family), " model's modules_to_save can be lm_head and ",
                     embedding.substr(embedding.rfind('.') + 1), " (", embedding,
                     "); remove it, or train the whole model without LoRA");
    if (!o.saves(found->first)) o.modules_to_save.push_back(found->first);
  }
  // Each resolved module by its path below the layer ("self_attn.q_proj"): a suffix match
  // that picks exactly it in every layer (a regex or all-linear becomes the modules it picks).
  for (const LoraModule& m : resolve_lora_targets(lora, model, source)) o.target_modules.push_back(m.name);
  return o;
}

std::vector<LoraTarget> adapter_targets(const ModelConfig& c, const std::vector<std::string>& targets, int64_t layer) {
  const std::vector<LoraTarget> linears = block_linears(c, layer);
  std::vector<bool> chosen(linears.size(), false);
  for (const std::string& target : targets) {
    bool found = false;
    for (size_t i = 0; i < linears.size(); ++i)
      if (matches(linears[i].module, target)) chosen[i] = found = true;
    if (!found) {
      std::string names;
      for (const std::string& n : adapter_module_names(c)) names += (names.empty() ? "" : ", ") + n;
      ZT_THROW_INPUT("lora.target_modules: '", target, "' names no linear layer of this ", family_name(c.family),
                     " model; its linear layers are ", names, " (or all-linear)");
    }
  }
  std::vector<LoraTarget> out;
  for (size_t i = 0; i < linears.size(); ++i)
    if (chosen[i]) out.push_back(linears[i]);
  return out;
}

std::vector<std::string> adapter_module_names(const ModelConfig& c) {
  std::vector<std::string> names;
  for (const LoraTarget& t : block_linears(c, 0)) {
    // The part after the layer index: "self_attn.q_proj", "attn.c_attn".
    const std::string marker = ".0.";
    const size_t at = t.module.find(marker);
    names.push_back(at == std::string::npos ? t.module : t.module.substr(at + marker.size()));
  }
  return names;
}

bool LoraOptions::saves(SavedModule m) const {
  return std::find(modules_to_save.begin(), modules_to_save.end(), m) != modules_to_save.end();
}

Philox lora_dropout_rng(uint64_t seed, uint64_t step, int layer, size_t index) {
  const uint64_t stream = (step << 24) ^ (static_cast<uint64_t>(layer + 1) << 8) ^ static_cast<uint64_t>(index);
  return Philox(seed ^ 0x10AAD0A7ull, stream);
}

std::string lora_unit_name(int64_t layer) { return "lora." + std::to_string(layer); }

bool is_lora_unit(const Unit& unit) { return unit.name().rfind("lora.", 0) == 0; }

std::vector<ParamSpec> lora_unit_specs(const ModelConfig& c, const LoraOptions& lora, int64_t layer) {
  std::vector<ParamSpec> specs;
  for (const LoraTarget& t : adapter_targets(c, lora.target_modules, layer)) {
    ParamSpec a;
    a.name = t.module + ".lora_A.weight";
    a.field = t.field;
    a.shape = {lora.r, t.in_features};
    a.decay = WeightDecay::Apply;
    if (lora.init == AdapterInit::Gaussian) {
      a.init = Init::Normal;
      a.init_std = 1.0f / static_cast<float>(lora.r);
    } else {
      a.init = Init::KaimingUniform;
    }
    ParamSpec b = a;
    b.name = t.module + ".lora_B.weight";
    b.shape = {t.rows, lora.r};
    b.init = Init::Zeros;
    specs.push_back(a);
    specs.push_back(b);
  }
  if (lora.bias == LoraBias::None) return specs;
  std::vector<std::string> adapted;
  for (const LoraTarget& t : adapter_targets(c, lora.target_modules, layer)) adapted.push_back(t.module);
  const auto is_adapted = [&](const std::string& module) {
    return std::find(adapted.begin(), adapted.end(), module) != adapted.end();
  };
  const std::vector<ParamSpec> block = unit_specs(c, UnitKind::Block, layer);
  for (size_t i = 0; i < block.size(); ++i) {
    const ParamSpec& s = block[i];
    if (!is_bias(s.field)) continue;
    const bool packed = i > 0 && block[i - 1].field == s.field;
    if (lora.bias == LoraBias::LoraOnly && !is_adapted(module_of(s.name))) {
      // Not trained. Kept as a held copy when another tensor packed in its field is trained:
      // the block reads the field as one view (lora_held_copy).
      bool sibling_adapted = false;
      for (const ParamSpec& o : block)
        sibling_adapted = sibling_adapted || (o.field == s.field && is_adapted(module_of(o.name)));
      if (!sibling_adapted) continue;
    }
    specs.push_back(trained_copy(s, packed));
  }
  return specs;
}

std::vector<ParamSpec> lora_final_norm_specs(const ModelConfig& c, const LoraOptions& lora) {
  std::vector<ParamSpec> specs;
  if (!lora.enabled() || lora.bias != LoraBias::All) return specs;
  for (const ParamSpec& s : unit_specs(c, UnitKind::Head))
    if (is_bias(s.field)) specs.push_back(trained_copy(s, false));
  return specs;
}

std::vector<ParamSpec> lora_lm_head_specs(const ModelConfig& c, const LoraOptions& lora) {
  std::vector<ParamSpec> specs;
  if (!lora.enabled() || !lora.saves(SavedModule::LmHead)) return specs;
  // The untied head's spec (HF's name and layout); a tied one starts as the token embedding.
  ModelConfig untied = c;
  untied.tie_word_embeddings = false;
  for (const ParamSpec& s : unit_specs(untied, UnitKind::Head)) {
    if (s.field != Field::LmHead) continue;
    ParamSpec copy = trained_copy(s, false);
    if (c.tie_word_embeddings) {
      const ParamSpec embedding = unit_specs(c, UnitKind::Embed).front();
      ZT_CHECK(embedding.field == Field::TokenEmbedding && embedding.shape == s.shape, "lora: the tied head's copy");
      copy.source_name = embedding.name;
      copy.init = embedding.init;
      copy.init_std = embedding.init_std;
    }
    specs.push_back(copy);
  }
  return specs;
}

std::vector<ParamSpec> lora_token_embedding_specs(const ModelConfig& c, const LoraOptions& lora) {
  std::vector<ParamSpec> specs;
  if (!lora.enabled() || !lora.saves(SavedModule::TokenEmbedding)) return specs;
  for (const ParamSpec& s : unit_specs(c, UnitKind::Embed))
    if (s.field == Field::TokenEmbedding) specs.push_back(trained_copy(s, false));
  return specs;
}

int64_t lora_unit_layer(const Unit& unit) {
  const std::string& n = unit.name();
  if (!is_lora_unit(unit) || n.size() <= 5 || n.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  return std::stoll(n.substr(5));
}

bool is_trained_base_copy(const ParamSpec& spec) {
  return is_bias(spec.field) || spec.field == Field::LmHead || spec.field == Field::TokenEmbedding;
}

bool lora_held_copy(const Unit& unit, const ParamSpec& spec, LoraBias bias) {
  return bias == LoraBias::LoraOnly && is_bias(spec.field) && !wrapped_by_adapter(unit, spec.name);
}

bool wrapped_by_adapter(const Unit& unit, const std::string& hf_name) {
  const std::string a = module_of(hf_name) + ".lora_A.weight";
  return std::any_of(unit.params().begin(), unit.params().end(), [&](const ParamEntry& e) { return e.name() == a; });
}

UnitWeights lora_trained_weights(const Unit& unit, Storage storage) {
  UnitWeights w;
  const auto& ps = unit.params();
  for (size_t i = 0; i < ps.size();) {
    if (!is_trained_base_copy(ps[i].spec)) {
      ++i;
      continue;
    }
    // The field's copies: this one and the packed ones right after it (one view).
    size_t end = i + 1;
    int64_t rows = ps[i].spec.shape[0];
    while (end < ps.size() && ps[end].spec.field == ps[i].spec.field) rows += ps[end++].spec.shape[0];
    const Tensor& first = storage == Storage::Values ? ps[i].value : ps[i].grad;
    if (first.data() != nullptr) {
      Shape shape = ps[i].spec.shape;
      shape[0] = rows;
      w.set(ps[i].spec.field, Tensor(first.data(), std::move(shape), first.dtype(), first.device(), ps[i].name()),
            ps[i].spec.layout);
    }
    i = end;
  }
  return w;
}

UnitWeights with_trained(const UnitWeights& base, const UnitWeights& trained) {
  UnitWeights out = base;
  for (size_t f = 0; f < kFieldCount; ++f) {
    const Field field = static_cast<Field>(f);
    if (trained[field].has_data()) out.set(field, trained[field], trained.layout(field));
  }
  return out;
}

BlockLora block_lora(const LoraOptions& options, const ModelConfig& c, const Unit& unit, int64_t layer) {
  BlockLora out;
  out.options = &options;
  const std::vector<LoraTarget> targets = adapter_targets(c, options.target_modules, layer);
  ZT_CHECK(unit.params().size() >= 2 * targets.size(), "unit ", unit.name(), " has ", unit.params().size(),
           " tensors for ", targets.size(), " adapters");
  for (size_t i = 0; i < targets.size(); ++i) {
    const ParamEntry& a = unit.params()[2 * i];
    const ParamEntry& b = unit.params()[2 * i + 1];
    out.adapters.push_back({targets[i], a.value, b.value, a.grad, b.grad});
  }
  out.trained_values = lora_trained_weights(unit, Storage::Values);
  out.trained_grads = lora_trained_weights(unit, Storage::Grads);
  // The held copies' rows in their packed field (copies of a field are back to back).
  std::vector<int64_t> next_row(kFieldCount, 0);
  for (const ParamEntry& e : unit.params()) {
    if (!is_bias(e.spec.field)) continue;
    int64_t& row = next_row[static_cast<size_t>(e.spec.field)];
    if (lora_held_copy(unit, e.spec, options.bias)) out.held.push_back({e.spec.field, row, e.spec.shape[0]});
    row += e.spec.shape[0];
  }
  return out;
}

LoraScratchSizes lora_scratch_sizes(const ModelConfig& c, const LoraOptions& lora, int64_t N) {
  LoraScratchSizes s;
  // dropout(x) and its gradient need a buffer; without dropout the products read x and add
  // into dx directly.
  if (lora.dropout > 0.0f)
    for (const LoraTarget& t : adapter_targets(c, lora.target_modules, 0)) s.xd = std::max(s.xd, N * t.in_features);
  s.h = N * lora.r;
  return s;
}

parallel::LinearLora linear_lora(const BlockLora& lora, int layer, Field field) {
  parallel::LinearLora out;
  if (!lora.options) return out;
  out.r = lora.options->r;
  out.scaling = lora.options->scaling;
  out.dropout = lora.train ? lora.options->dropout : 0.0f;
  out.scratch = lora.scratch;
  for (size_t i = 0; i < lora.adapters.size(); ++i) {
    const AdapterViews& ad = lora.adapters[i];
    if (ad.target.field != field) continue;
    out.adapters.push_back({ad.a, ad.b, ad.da, ad.db, ad.target.row_begin, ad.target.rows, ad.target.in_features,
                            lora_dropout_rng(lora.seed, lora.step, layer, i), ad.target.module});
  }
  for (const HeldRows& h : lora.held)
    if (linear_of_bias(h.bias) == field && lora.trained_grads[h.bias].has_data())
      out.held_grads.push_back(lora.trained_grads[h.bias].narrow(0, h.row_begin, h.rows));
  return out;
}

void lora_forward(const BlockLora& lora, int layer, Field field, const Tensor& x, const Tensor& y) {
  if (!lora.options) return;
  parallel::lora_forward(linear_lora(lora, layer, field), parallel::LinearKind::Replicated, parallel::Group(), x, y);
}

void lora_backward(const BlockLora& lora, int layer, Field field, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  if (!lora.options) return;
  parallel::lora_backward(linear_lora(lora, layer, field), parallel::LinearKind::Replicated, parallel::Group(), x, dy,
                          dx);
}

}  // namespace zt::model
