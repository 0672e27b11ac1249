// The weights table (see weights.h): field definitions from the architecture flags, names
// from the family's HF name table, and the by-field views.
#include "model/weights.h"

#include <cmath>

#include "core/error.h"
#include "model/hf_names.h"

namespace zt::model {

const char* field_name(Field field) {
  static const char* const names[kFieldCount] = {
      "token embedding", "position embedding", "norm1 weight",      "norm1 bias",      "qkv weight",    "qkv bias",
      "attn out weight", "attn out bias",      "norm2 weight",      "norm2 bias",      "mlp in weight", "mlp in bias",
      "mlp out weight",  "mlp out bias",       "final norm weight", "final norm bias", "lm head"};
  return names[static_cast<size_t>(field)];
}

namespace {

// What a field is under a config, before names: its rows (one group per HF tensor a family
// may split it into) and columns of the [out, in] logical shape; cols = 0 for vectors.
struct FieldDef {
  bool present = false;
  std::vector<int64_t> rows;
  int64_t cols = 0;
  int64_t file_rows = 0;  // vocabulary matrices: the unpadded rows files hold; else 0
  bool linear = false;    // a linear weight: stored in the family's file layout
  Init init = Init::Normal;
  float init_std = 0.0f;
  WeightDecay decay = WeightDecay::Apply;
  TpSplit split = TpSplit::None;
};

FieldDef matrix(std::vector<int64_t> rows, int64_t cols, float std, TpSplit split) {
  FieldDef d;
  d.present = true;
  d.rows = std::move(rows);
  d.cols = cols;
  d.linear = true;
  d.init_std = std;
  d.split = split;
  return d;
}
FieldDef vector_of(bool present, std::vector<int64_t> rows, Init init, TpSplit split = TpSplit::None) {
  FieldDef d;
  d.present = present;
  d.rows = std::move(rows);
  d.init = init;
  d.decay = WeightDecay::Skip;  // HF Trainer: no decay for biases and norm gains
  d.split = split;
  return d;
}
FieldDef vocab_matrix(bool present, const ModelConfig& c) {
  FieldDef d = matrix({c.padded_vocab_size()}, c.hidden_size, c.initializer_range, TpSplit::Vocab);
  d.present = present;
  d.linear = false;  // [V, C] whatever the family's linear layout (embedding and head ops read rows)
  d.file_rows = c.vocab_size;
  return d;
}

FieldDef field_def(const ModelConfig& c, Field f) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const float std = c.initializer_range;
  // GPT-2 scales the residual projections by 1/sqrt(2 L) at init (HF _init_weights).
  const float residual_std =
      c.residual_init == ResidualInit::DepthScaled ? std / std::sqrt(2.0f * static_cast<float>(c.num_layers)) : std;
  const std::vector<int64_t> qkv_rows{q, kv, kv};
  const std::vector<int64_t> mlp_rows =
      c.mlp == MlpKind::GatedSilu ? std::vector<int64_t>{F, F} : std::vector<int64_t>{F};  // [gate; up]
  const bool learned = c.position == PositionKind::Learned;
  switch (f) {
    case Field::TokenEmbedding:
      return vocab_matrix(true, c);
    case Field::PositionEmbedding: {
      FieldDef d = matrix({c.max_position_embeddings}, C, std, TpSplit::None);
      d.present = learned;
      d.linear = false;
      return d;
    }
    case Field::Norm1Weight:
    case Field::Norm2Weight:
    case Field::FinalNormWeight:
      return vector_of(true, {C}, Init::Ones);
    case Field::Norm1Bias:
    case Field::Norm2Bias:
    case Field::FinalNormBias:
      return vector_of(c.norm_has_bias(), {C}, Init::Zeros);
    case Field::QkvWeight:
      return matrix(qkv_rows, C, std, TpSplit::Output);
    case Field::QkvBias:
      return vector_of(c.qkv_bias, qkv_rows, Init::Zeros, TpSplit::Output);
    case Field::AttnOutWeight:
      return matrix({C}, q, residual_std, TpSplit::Input);
    case Field::AttnOutBias:
      return vector_of(c.attn_out_bias, {C}, Init::Zeros);
    case Field::MlpInWeight:
      return matrix(mlp_rows, C, std, TpSplit::Output);
    case Field::MlpInBias:
      return vector_of(c.mlp_bias, mlp_rows, Init::Zeros, TpSplit::Output);
    case Field::MlpOutWeight:
      return matrix({C}, F, residual_std, TpSplit::Input);
    case Field::MlpOutBias:
      return vector_of(c.mlp_bias, {C}, Init::Zeros);
    case Field::LmHead:
      return vocab_matrix(!c.tie_word_embeddings, c);
  }
  ZT_CHECK(false, "unknown field");
  return {};
}

// The fields each unit kind must have (whichever the config turns on).
std::vector<Field> unit_fields(UnitKind kind) {
  switch (kind) {
    case UnitKind::Embed:
      return {Field::TokenEmbedding, Field::PositionEmbedding};
    case UnitKind::Block:
      return {Field::Norm1Weight,   Field::Norm1Bias,   Field::QkvWeight,    Field::QkvBias,
              Field::AttnOutWeight, Field::AttnOutBias, Field::Norm2Weight,  Field::Norm2Bias,
              Field::MlpInWeight,   Field::MlpInBias,   Field::MlpOutWeight, Field::MlpOutBias};
    case UnitKind::Head:
      return {Field::FinalNormWeight, Field::FinalNormBias, Field::LmHead};
  }
  return {};
}

std::string with_layer(std::string name, int64_t layer) {
  const size_t at = name.find("{L}");
  if (at != std::string::npos) name.replace(at, 3, std::to_string(layer));
  return name;
}

// The ParamSpecs of one field: one per HF tensor, packed back to back.
void emit_field(const ModelConfig& c, const HfNameTable& table, const HfField& named, const FieldDef& d, int64_t layer,
                const std::function<void(const ParamSpec&)>& fn) {
  const bool split = named.names.size() == d.rows.size() && d.rows.size() > 1;
  ZT_CHECK(split || named.names.size() == 1, family_name(c.family), ": ", named.names.size(), " HF tensors for the ",
           d.rows.size(), " row groups of ", field_name(named.field));
  const bool in_out = d.linear && table.linear_layout == WeightLayout::InOut;
  ZT_CHECK(!(in_out && split), family_name(c.family), ": ", field_name(named.field),
           " in [in, out] layout cannot be split into row groups");
  for (size_t i = 0; i < named.names.size(); ++i) {
    int64_t rows = 0;
    if (split) {
      rows = d.rows[i];
    } else {
      for (int64_t r : d.rows) rows += r;
    }
    ParamSpec s;
    s.name = with_layer(named.names[i], layer);
    s.field = named.field;
    s.shape = d.cols == 0 ? Shape{rows} : in_out ? Shape{d.cols, rows} : Shape{rows, d.cols};
    s.hf_shape = d.file_rows > 0 ? Shape{d.file_rows, d.cols} : s.shape;
    s.init = d.init;
    s.init_std = d.init_std;
    s.decay = d.decay;
    s.placement = i == 0 ? ParamSpec::Placement::Aligned : ParamSpec::Placement::Packed;
    s.layout = s.hf_layout = d.linear ? table.linear_layout : WeightLayout::OutIn;
    s.tp_split = d.split;
    fn(s);
  }
}

const std::vector<HfField>& named_fields(const HfNameTable& t, UnitKind kind) {
  return kind == UnitKind::Embed ? t.embed : kind == UnitKind::Block ? t.block : t.head;
}

}  // namespace

void for_each_weight(const ModelConfig& c, UnitKind kind, int64_t layer,
                     const std::function<void(const ParamSpec&)>& fn) {
  const HfNameTable& table = hf_name_table(c.family);
  const std::vector<HfField>& named = named_fields(table, kind);
  for (Field f : unit_fields(kind)) {
    if (!field_def(c, f).present) continue;
    bool found = false;
    for (const HfField& n : named) found = found || n.field == f;
    if (!found)
      ZT_THROW_UNSUPPORTED(family_name(c.family), " models have no HF tensor for the ", field_name(f),
                           " this config needs (model_type ", c.model_type, ")");
  }
  for (const HfField& n : named) {
    const FieldDef d = field_def(c, n.field);
    if (d.present) emit_field(c, table, n, d, layer, fn);
  }
}

std::vector<ParamSpec> unit_specs(const ModelConfig& config, UnitKind kind, int64_t layer) {
  std::vector<ParamSpec> specs;
  for_each_weight(config, kind, layer, [&](const ParamSpec& s) { specs.push_back(s); });
  return specs;
}

void add_model_units(ParameterRegistry& registry, const ModelConfig& c, int shard_count) {
  ZT_CHECK(registry.size() == 0, "add_model_units: the registry is not empty");
  registry.add_unit("embed", unit_specs(c, UnitKind::Embed), shard_count);
  for (int64_t i = 0; i < c.num_layers; ++i)
    registry.add_unit("block." + std::to_string(i), unit_specs(c, UnitKind::Block, i), shard_count);
  registry.add_unit("head", unit_specs(c, UnitKind::Head), shard_count);
}

Unit& embed_unit(ParameterRegistry& r) { return r.unit(0); }
Unit& block_unit(ParameterRegistry& r, int64_t layer) { return r.unit(static_cast<size_t>(layer) + 1); }
// The head follows the blocks; a LoRA model's adapter units come after it.
Unit& head_unit(ParameterRegistry& r) {
  for (auto it = r.units().rbegin(); it != r.units().rend(); ++it)
    if ((*it)->name() == "head") return **it;
  ZT_CHECK(false, "the registry has no head unit");
  return *r.units().back();  // not reached
}
const Unit& embed_unit(const ParameterRegistry& r) { return r.unit(0); }
const Unit& block_unit(const ParameterRegistry& r, int64_t layer) { return r.unit(static_cast<size_t>(layer) + 1); }
const Unit& head_unit(const ParameterRegistry& r) { return head_unit(const_cast<ParameterRegistry&>(r)); }

ModelConfig tensor_parallel_config(const ModelConfig& c, int tp) {
  if (tp < 1) ZT_THROW_INPUT("tensor parallel size ", tp, ": must be at least 1");
  const auto divides = [&](int64_t n, const char* key) {
    if (n % tp != 0)
      ZT_THROW_INPUT("tensor parallel size ", tp, " does not divide the model's ", key, " (", n,
                     "): use a size that divides it");
  };
  divides(c.num_heads, "num_attention_heads");
  divides(c.num_kv_heads, "num_key_value_heads");
  divides(c.intermediate_size, "intermediate_size");
  divides(c.padded_vocab_size(), "vocabulary (padded to a multiple of 128)");
  ModelConfig local = c;
  local.num_heads /= tp;
  local.num_kv_heads /= tp;
  local.intermediate_size /= tp;
  return local;
}

TpSplit tp_split(const ModelConfig& c, Field f) { return field_def(c, f).split; }

TensorParallelShard tensor_parallel_shard(const ModelConfig& c, Field f, int rank, int tp) {
  tensor_parallel_config(c, tp);  // the divisibility checks
  ZT_CHECK(rank >= 0 && rank < tp, "tensor parallel rank ", rank, " outside [0, ", tp, ")");
  const FieldDef d = field_def(c, f);
  int64_t total_rows = 0;
  for (int64_t r : d.rows) total_rows += r;
  const RowSpan all_rows{0, total_rows}, all_cols{0, d.cols};
  const auto share = [&](int64_t begin, int64_t n) { return RowSpan{begin + rank * (n / tp), begin + (rank + 1) * (n / tp)}; };
  TensorParallelShard s;
  s.cols = all_cols;
  switch (d.split) {
    case TpSplit::Output: {
      int64_t at = 0;
      for (int64_t group : d.rows) {
        s.rows.push_back(share(at, group));
        at += group;
      }
      break;
    }
    case TpSplit::Input:
      s.rows = {all_rows};
      s.cols = share(0, d.cols);
      break;
    case TpSplit::Vocab:
      s.rows = {share(0, total_rows)};
      break;
    case TpSplit::None:
      s.rows = {all_rows};
      break;
  }
  return s;
}

UnitWeights::UnitWeights(const Unit& unit, Storage storage) {
  const auto& ps = unit.params();
  std::array<bool, kFieldCount> seen{};
  for (size_t i = 0; i < ps.size();) {
    const ParamEntry& first = ps[i];
    const size_t f = static_cast<size_t>(first.spec.field);
    ZT_CHECK(!seen[f], unit.name(), ": field ", field_name(first.spec.field), " appears twice");
    seen[f] = true;
    // The field's tensors: this one and the packed ones right after it.
    size_t end = i + 1;
    int64_t rows = first.spec.shape[0];
    while (end < ps.size() && ps[end].spec.field == first.spec.field) {
      ZT_CHECK(ps[end].offset == ps[end - 1].offset + ps[end - 1].numel() &&
                   ps[end].spec.shape.size() == first.spec.shape.size(),
               unit.name(), ": the tensors of ", field_name(first.spec.field), " are not packed");
      rows += ps[end].spec.shape[0];
      ++end;
    }
    layouts_[f] = first.spec.layout;
    const Tensor& base = storage == Storage::Values ? first.value : first.grad;
    if (base.data() != nullptr) {
      Shape shape = first.spec.shape;
      shape[0] = rows;
      views_[f] = Tensor(base.data(), std::move(shape), base.dtype(), base.device(), first.name());
    }
    i = end;
  }
}

}  // namespace zt::model
