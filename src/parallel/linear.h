// The parallel linear: one call for every linear of the model, carrying what tensor
// parallelism, LoRA and (later) FP8 need of it. Below model/ (it knows no Field, no unit):
// the model maps its weights table onto it (model/block.cpp, TpSplit -> LinearKind).
//
//   y = x W^T + b  (+ scaling * B A dropout(x), per LoRA adapter, on its output columns)
//
// Kinds (Megatron's tensor-parallel layers, core/tensor_parallel/{mappings,layers}.py):
//   Replicated  every rank holds W whole; no collective.
//   Column      W holds this rank's output rows (its share of every packed row group,
//               model/weights.h: tensor_parallel_shard): y is this rank's columns of the
//               whole y. Its input x is replicated: the forward reads it as it is (identity)
//               and the backward all-reduces (sums) dx over the group.
//   Row         W holds this rank's input columns; x is this rank's columns of the whole x
//               (a column-parallel layer's output): each rank's product is a partial sum
//               and the forward all-reduces y. The bias is added once (by rank 0, before
//               the sum); dx needs no collective.
// With no group (or a group of one rank) every kind is today's single-rank linear: the
// same op calls in the same order (ops::linear_forward/backward, then the adapters'
// ops::gemm calls), so the results are bit-identical to the hand-paired calls they replace.
//
// LoRA under tensor parallelism: a column layer's A is whole and B holds the rank's output
// rows (its adapter column window is in the rank's local output); dh = s dy B is then a
// partial sum, all-reduced before dA and dx. A row layer's A holds the rank's input
// columns and B is whole: h = x A^T is a partial sum, added into y's partial before y's
// all-reduce (the product is linear in h), and all-reduced for dB in the backward.
// Dropout masks are drawn over the rank's own x (with tp > 1 a row layer's masks are not
// the single rank's: the same distribution, other draws).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/weight_layout.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace zt::parallel {

enum class LinearKind : uint8_t { Replicated, Column, Row };
const char* linear_kind_name(LinearKind kind);

// The precision recipe of a linear's GEMMs. Activations: the GEMMs run in the activations'
// dtype (bf16 runs: bf16 with f32 accumulation), today's only recipe. FP8 recipes (E4M3
// forward, E5M2 gradients, per-tensor scales) are named so that a caller asking for one
// gets a clear refusal until the kernels exist.
enum class Precision : uint8_t { Activations, Fp8Tensorwise };
const char* precision_name(Precision precision);

// The tensor-parallel group is a comm::Group (comm/group.h): an empty one is one rank,
// today's behaviour.
using comm::Group;

// One LoRA adapter of a linear: A [r, in], B [cols, r] and their gradients (undefined
// without a gradient buffer: forward only), adding to the output columns
// [col_begin, col_begin + cols) of the linear's output (a packed field's module: q of
// [q; k; v]), with its dropout mask stream.
struct LoraAdapter {
  Tensor a, b, da, db;
  int64_t col_begin = 0, cols = 0;
  int64_t in_features = 0;
  Philox dropout_rng{0, 0};
  std::string name;  // for messages (the HF module path)
};

// Flat scratch shared by the adapters (cut to shape at use): dropout(x) and its gradient
// [N * in] (only with dropout), h and dh [N * r], in the activations' dtype.
struct LoraScratch {
  Tensor xd, dxd, h, dh;
};

// The adapters of one linear. `held_grads`: views of the bias gradient zeroed after the
// backward (LoRA's held copies: frozen rows packed in a trained bias, model/lora.h).
struct LinearLora {
  std::vector<LoraAdapter> adapters;
  int64_t r = 0;
  float scaling = 1.0f;
  float dropout = 0.0f;  // 0: none (also evaluation)
  LoraScratch scratch;
  std::vector<Tensor> held_grads;
  bool empty() const { return adapters.empty() && held_grads.empty(); }
};

// One linear call: its kind, group, weights, adapters and recipe. Views only; cheap to build
// per call.
struct Linear {
  LinearKind kind = LinearKind::Replicated;
  Group group;
  Tensor weight, bias;  // the rank's shard; bias undefined: none
  WeightLayout layout = WeightLayout::OutIn;
  const LinearLora* lora = nullptr;  // null: no adapters
  Precision precision = Precision::Activations;
};

// The parameter gradients a backward accumulates into (+=; undefined: skipped).
struct LinearGrads {
  Tensor weight, bias;
};

// y [N, out_local] (=) the linear of x [N, in_local] (Row: all-reduced over the group).
void linear_forward(const Linear& linear, const Tensor& y, const Tensor& x);
// dx [N, in_local] (=; skipped when undefined) and the gradients (+=) from dy [N, out_local];
// x as the forward read it. Column: dx all-reduced over the group.
void linear_backward(const Linear& linear, const LinearGrads& grads, const Tensor& dx, const Tensor& dy,
                     const Tensor& x);

// The adapters alone (the linear's second half; model/lora.h's lora_forward/backward):
// y (+=) adapters(x); dA, dB, dx (+=) from dy. `group` and `kind` as the linear's.
void lora_forward(const LinearLora& lora, LinearKind kind, const Group& group, const Tensor& x, const Tensor& y);
void lora_backward(const LinearLora& lora, LinearKind kind, const Group& group, const Tensor& x, const Tensor& dy,
                   const Tensor& dx);

}  // namespace zt::parallel
