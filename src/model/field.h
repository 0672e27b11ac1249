// The named weights of a model, independent of any family's HF names: every parameter in
// the registry belongs to one field, and the model code binds its tensors by field
// (model/weights.h), never by position or by name.
#pragma once
#include <cstdint>

namespace zt::model {

enum class Field : uint8_t {
  // unit "embed"
  TokenEmbedding,
  PositionEmbedding,  // PositionKind::Learned
  // units "block.i"
  Norm1Weight,
  Norm1Bias,  // LayerNorm
  QkvWeight,  // [q; k; v] rows: one GEMM
  QkvBias,
  AttnOutWeight,
  AttnOutBias,
  Norm2Weight,
  Norm2Bias,
  MlpInWeight,  // Gelu: fc [F]; GatedSilu: [gate; up] rows [2F]: one GEMM
  MlpInBias,
  MlpOutWeight,
  MlpOutBias,
  // unit "head"
  FinalNormWeight,
  FinalNormBias,
  LmHead,  // untied heads only
};
constexpr int kFieldCount = static_cast<int>(Field::LmHead) + 1;

const char* field_name(Field field);

// The dimension (of the [out, in] logical shape) a tensor-parallel rank would split: the
// output features of a column-parallel linear (q/k/v, MLP in), the input features of a
// row-parallel one (attention out, MLP out), the vocabulary rows of embeddings and head.
// Recorded by the weights table; model/weights.h's tensor_parallel_shard reads it.
enum class TpSplit : uint8_t { None, Output, Input, Vocab };

}  // namespace zt::model
