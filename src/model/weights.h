// The weights table: every parameter of a model, from its ModelConfig's architecture flags
// (shapes, init, weight decay, tensor-parallel split) and its family's HF name table
// (model/hf_names.h: names, order, file layout). One visitor yields them; the registry
// (and through it HF load/save, checkpoint names and ZeRO slices) is built from it, and the
// model binds its tensors by field (UnitWeights), never by position or by name.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/field.h"
#include "model/registry.h"

namespace zt::model {

enum class UnitKind { Embed, Block, Head };

// The parameters of one unit ("embed", "block.<layer>", "head") in registry order.
// `layer` is read for blocks only. Throws Unsupported when the config needs a field the
// family's name table does not have.
void for_each_weight(const ModelConfig& config, UnitKind kind, int64_t layer,
                     const std::function<void(const ParamSpec&)>& fn);
std::vector<ParamSpec> unit_specs(const ModelConfig& config, UnitKind kind, int64_t layer = 0);

// Adds the units embed, block.0 .. block.L-1, head to an empty registry.
void add_model_units(ParameterRegistry& registry, const ModelConfig& config, int shard_count);

// The registry's units by role (the order add_model_units gives them).
Unit& embed_unit(ParameterRegistry& registry);
Unit& block_unit(ParameterRegistry& registry, int64_t layer);
Unit& head_unit(ParameterRegistry& registry);
const Unit& embed_unit(const ParameterRegistry& registry);
const Unit& block_unit(const ParameterRegistry& registry, int64_t layer);
const Unit& head_unit(const ParameterRegistry& registry);

// Tensor parallelism's seam (the parallel layers and their collectives come with that
// feature): the part of a field that rank `rank` of `tp` holds, in the field's logical
// [out, in] coordinates (a vector's: rows only, cols {0, 0}).
//   TpSplit::Output (column-parallel: q/k/v, MLP in, their biases): each row group (q, k, v;
//     gate, up) split into tp contiguous shares, rank r taking share r of every group in
//     order. Rank r's packed matrix is then [q_r; k_r; v_r] / [gate_r; up_r]: the whole
//     model's packed layout for its Hq/tp query heads, Hkv/tp kv heads and F/tp features,
//     so the GEMM, RoPE and attention kernels run on a shard unchanged (no per-head-group
//     repacking of q/k/v is needed, and HF files map to it as they are).
//   TpSplit::Input (row-parallel: attention out, MLP out): every row, the rank's share of
//     the input features (columns); the partial outputs are summed across ranks.
//   TpSplit::Vocab: the rank's share of the (padded) vocabulary rows.
//   TpSplit::None (norms, biases of row-parallel layers, positions): everything.
// BadInput when tp does not divide what it splits (tensor_parallel_config says which).
struct RowSpan {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
struct TensorParallelShard {
  std::vector<RowSpan> rows;  // in order: the shard's packed rows
  RowSpan cols;
};
TensorParallelShard tensor_parallel_shard(const ModelConfig& config, Field field, int rank, int tp);
// The shape a rank's block computes with: heads, kv heads and intermediate size divided by
// tp (BadInput naming the config key that tp does not divide).
ModelConfig tensor_parallel_config(const ModelConfig& config, int tp);
// The table's split of a field (what tensor_parallel_shard reads; the block maps it to its
// linears' kinds, model/block.h's linear_kind).
TpSplit tp_split(const ModelConfig& config, Field field);

enum class Storage { Values, Grads };

// Named views of one unit's parameters (or gradients), by field. A field made of several
// packed HF tensors (q, k, v; gate, up) is one view over all of them: [sum of rows, ...].
// Views are undefined where the unit has no such field or no storage.
class UnitWeights {
 public:
  UnitWeights() = default;
  UnitWeights(const Unit& unit, Storage storage);
  const Tensor& operator[](Field field) const { return views_[static_cast<size_t>(field)]; }
  // How the field's matrix is stored (linear weights: the family's file layout).
  WeightLayout layout(Field field) const { return layouts_[static_cast<size_t>(field)]; }
  // Points `field` at another view (LoRA's trained copies replace the frozen base's).
  void set(Field field, Tensor view, WeightLayout layout) {
    views_[static_cast<size_t>(field)] = std::move(view);
    layouts_[static_cast<size_t>(field)] = layout;
  }

 private:
  std::array<Tensor, kFieldCount> views_;
  std::array<WeightLayout, kFieldCount> layouts_{};
};

}  // namespace zt::model
