// Merging a PEFT LoRA adapter into its base model (see lora_merge.h).
#include "model/lora_merge.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/hf_check.h"
#include "model/hf_dir.h"
#include "model/hf_weights.h"
#include "model/lora_adapter.h"
#include "model/weights.h"
#include "ops/elementwise.h"

namespace zt::model {
namespace {

namespace fs = std::filesystem;

// The dtype of the base's weights: the first floating tensor of its first file.
DType base_files_dtype(const std::string& dir) {
  for (const std::string& path : hf_weight_files(dir)) {
    const io::SafetensorsReader file(path);
    for (const std::string& name : file.names()) {
      const io::TensorInfo& info = file.info(name);
      if (info.supported && is_floating(info.dtype)) return info.dtype;
    }
  }
  return DType::F32;
}

// W[row, col] of the module's [out, in] matrix += delta, where the registry tensor holds
// [out, in] (OutIn) or its transpose [in, out] (GPT-2's Conv1D).
void add_delta(const ParamEntry& entry, const LoraFactors& f, double scaling) {
  const Tensor& w = entry.value;
  ZT_CHECK(w.dtype() == DType::F32 && w.dim() == 2, entry.name());
  const bool in_out = entry.spec.layout == WeightLayout::InOut;
  const int64_t out = f.module.out_features(), in = f.module.in_features, r = f.a->size(0);
  ZT_CHECK((in_out ? w.size(0) : w.size(1)) == in && (in_out ? w.size(1) : w.size(0)) == out, entry.name());
  float* wd = w.data_as<float>();
  const int64_t s0 = w.strides()[0], s1 = w.strides()[1];
  const float* a = f.a.data<float>();
  const float* b = f.b.data<float>();
  std::vector<double> row(static_cast<size_t>(in));
  for (int64_t i = 0; i < out; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t k = 0; k < r; ++k) {
      const double bik = b[i * r + k];
      const float* ak = a + k * in;
      for (int64_t j = 0; j < in; ++j) row[static_cast<size_t>(j)] += bik * ak[j];
    }
    for (int64_t j = 0; j < in; ++j) {
      float& wij = in_out ? wd[j * s0 + i * s1] : wd[i * s0 + j * s1];
      wij = static_cast<float>(wij + scaling * row[static_cast<size_t>(j)]);
    }
  }
}

// A merged weight must be finite in the output's dtype: a NaN/Inf in the adapter (or a
// delta past f16's range) would otherwise be written as the merged model.
void check_merged_finite(const ParamEntry& entry, const std::string& adapter_weights, const char* what) {
  if (!ops::all_finite(entry.value))
    ZT_THROW_INPUT(adapter_weights, ": merging ", what, " into '", entry.name(),
                   "' gives non-finite values (NaN or Inf): the adapter's tensors hold NaN/Inf (saved by a run "
                   "that diverged, or damaged); nothing was written");
}

void check_fits_dtype(const ParamEntry& entry, DType dtype) {
  if (dtype != DType::F16) return;  // bf16 has f32's range
  const float* v = entry.value.data_as<float>();
  for (int64_t i = 0; i < entry.value.numel(); ++i)
    if (std::fabs(v[i]) > 65504.0f)
      ZT_THROW_INPUT("lora merge: the merged '", entry.name(), "' holds ", v[i],
                     ", beyond f16's range (it would be written as Inf); nothing was written: merge with --dtype "
                     "bf16 or f32");
}

bool has_tokenizer(const std::string& dir) {
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "vocab.json", "tokenizer.model"})
    if (fs::is_regular_file(dir + "/" + name, ec)) return true;
  return false;
}

// The directory a path names with links and ".." resolved (as far as it exists).
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path).lexically_normal();
  while (!p.has_filename() && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();  // "dir/"
  return p;
}

// Whether `inner` is `outer` or lies inside it.
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

// OUT replaces its directory as a whole: one that is (or lies inside) the base model's or
// the adapter's directory would overwrite the input the merge reads.
void check_out_is_not_an_input(const std::string& base_dir, const std::string& adapter_dir,
                               const std::string& out_dir) {
  const fs::path out = resolved(out_dir);
  const std::pair<const char*, const std::string*> inputs[] = {{"the base model's directory BASE", &base_dir},
                                                               {"the adapter's directory ADAPTER", &adapter_dir}};
  for (const auto& [what, dir] : inputs) {
    const fs::path in = resolved(*dir);
    std::error_code ec;
    const bool same = within(out, in) || (fs::exists(out_dir, ec) && fs::equivalent(out_dir, *dir, ec));
    if (same)
      ZT_THROW_INPUT(
          "lora merge: OUT '", out_dir, "' ", out == in ? "is " : "lies inside ", what, " ('", *dir,
          "'): the merged model would replace the input it is read from; give OUT a directory of its own "
          "(e.g. '",
          (resolved(base_dir).filename().string().empty() ? std::string("merged")
                                                          : resolved(base_dir).filename().string() + "-merged"),
          "' beside it)");
  }
}

}  // namespace

bool adapter_unties_head(const LoraAdapter& adapter, const ModelConfig& base) {
  if (!base.tie_word_embeddings) return false;
  const std::string embedding = unit_specs(base, UnitKind::Embed).front().name;
  for (const auto& [name, value] : adapter.replaced)
    if (name == "lm_head.weight" || name == embedding) return true;
  return false;
}

std::unique_ptr<Transformer> load_base_for_merge(const std::string& base_dir, const ModelConfig& base,
                                                 const LoraAdapter& adapter, const ModelOptions& options) {
  if (!adapter_unties_head(adapter, base)) {
    auto model = std::make_unique<Transformer>(base, options);
    load_hf_weights(model->registry(), base, base_dir);
    return model;
  }
  ModelConfig untied = base;
  untied.tie_word_embeddings = false;
  auto model = std::make_unique<Transformer>(untied, options);
  ParamEntry* head = model->registry().find("lm_head.weight");
  ZT_CHECK(head != nullptr, "lora merge: the untied model has no lm_head.weight");
  head->spec.source_name = unit_specs(base, UnitKind::Embed).front().name;
  load_hf_weights(model->registry(), untied, base_dir);
  return model;
}

LoraMergeSummary merge_lora_into(Transformer& base, const LoraAdapter& adapter, const std::string& adapter_dir,
                                 const std::function<void(const LoraMergeProgress&)>& on_layer) {
  const ModelConfig& config = base.config();
  ParameterRegistry& registry = base.registry();
  const std::string weights = adapter_dir + "/adapter_model.safetensors";
  // A tied base would read a replaced embedding as its head too: PEFT's copies untie them.
  ZT_CHECK(!adapter_unties_head(adapter, config),
           "merge_lora_into: the adapter unties the base's head; load the base with load_base_for_merge");
  LoraMergeSummary s;
  s.scaling = adapter.config.scaling();
  for (const auto& [name, value] : adapter.replaced) {
    ParamEntry* entry = registry.find(name);
    if (entry == nullptr)
      ZT_THROW_INPUT(weights, ": tensor ", peft_base_key(name, false), " replaces ", name,
                     ", which the base model does not have");
    const HfTensorLayout layout = hf_layout(config, entry->spec);
    if (value->shape() != layout.shape)
      ZT_THROW_INPUT(weights, ": tensor ", name, " (trained bias or modules_to_save) does not have the base's shape");
    from_hf_layout(config, entry->spec, value, entry->value);
    check_merged_finite(*entry, weights, "its trained copy");
    ++s.replaced;
  }
  size_t next = 0;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    for (; next < adapter.factors.size() && adapter.factors[next].layer == l; ++next) {
      const LoraFactors& f = adapter.factors[next];
      const std::string name = lora_module_path(config, l, f.module.name) + ".weight";
      ParamEntry* entry = registry.find(name);
      ZT_CHECK(entry != nullptr, "no registry entry ", name);
      add_delta(*entry, f, s.scaling);
      check_merged_finite(*entry, weights, "the LoRA delta");
      ++s.modules;
    }
    if (on_layer) on_layer({l, config.num_layers});
  }
  return s;
}

LoraMergeSummary merge_lora(const std::string& base_dir, const std::string& adapter_dir, const std::string& out_dir,
                            const LoraMergeOptions& options) {
  check_out_is_not_an_input(base_dir, adapter_dir, out_dir);
  const ModelConfig config = load_hf_config(base_dir);
  // The adapter first: a mismatched one fails before the base is read.
  const LoraAdapter adapter = load_lora_adapter(adapter_dir, config);

  ModelOptions mo;
  mo.param_dtype = DType::F32;
  mo.allocate_grads = false;
  check_hf_config_against_weights(config, base_dir + "/config.json", base_dir);
  check_model_fits_host(config, static_cast<double>(dtype_size(mo.param_dtype)), base_dir + ": the model's parameters");
  const std::unique_ptr<Transformer> model = load_base_for_merge(base_dir, config, adapter, mo);
  LoraMergeSummary s = merge_lora_into(*model, adapter, adapter_dir, options.on_layer);
  s.untied_head = adapter_unties_head(adapter, config);
  s.dtype = options.dtype_given ? options.dtype : base_files_dtype(base_dir);
  // Only the weights the adapter changed can leave the base's range.
  ParameterRegistry& merged = model->registry();
  for (const auto& [name, value] : adapter.replaced) check_fits_dtype(*merged.find(name), s.dtype);
  for (const LoraFactors& f : adapter.factors)
    check_fits_dtype(*merged.find(lora_module_path(model->config(), f.layer, f.module.name) + ".weight"), s.dtype);

  SavePretrainedOptions so;
  so.dtype = s.dtype;
  if (has_tokenizer(base_dir)) so.tokenizer_files.push_back(base_dir);
  std::error_code ec;
  if (fs::is_regular_file(base_dir + "/generation_config.json", ec))
    so.generation_config = base_dir + "/generation_config.json";
  save_pretrained(*model, out_dir, so);
  return s;
}

}  // namespace zt::model
