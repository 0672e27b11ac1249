// LoRA adapters (issue 20): for each targeted linear of every block,
//
//   y += scaling * B (A (dropout(x)))      A [r, in], B [out, r]   (PEFT's lora_A, lora_B)
//
// The adapters of block l are the unit "lora.<l>", beside the (frozen) base units: every
// ZeRO mechanism works per unit (slices, buckets, the optimizer's state, checkpoints), so
// a trainable unit of its own gives the base no gradient buffer, no master and no state
// with no per-parameter special case (registry.h, Training).
//
// One adapter per PEFT module: a packed field (Llama's [q; k; v], [gate; up]) carries one
// per HF tensor it packs that the targets name, each covering that tensor's output rows.
//
// Precision: the adapters are stored in the parameters' dtype (bf16/fp16 runs: 16-bit, with
// the optimizer's f32 master and f32 moments), so the GEMMs run in the compute dtype, as
// PEFT's f32 adapters under autocast do (cast at use); the update is applied in f32 to the
// master, as PEFT's f32 adapters are updated.
//
// The backward recomputes dropout(x) and x A^T (one [N, in] x [in, r] GEMM per adapter)
// rather than saving them per layer: no LoRA activations are kept, and activation
// checkpointing's recompute is consistent by construction (the masks depend on (seed,
// step, layer, adapter) only).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/field.h"
#include "model/lora_config.h"
#include "model/registry.h"
#include "model/weights.h"
#include "parallel/linear.h"

namespace zt::model {

// The modules of PEFT's modules_to_save that train here: the token embedding (Llama's
// embed_tokens, GPT-2's wte) and the head (lm_head).
enum class SavedModule { TokenEmbedding, LmHead };

// PEFT's init_lora_weights: true (A Kaiming-uniform with a = sqrt(5), i.e.
// U(-1/sqrt(in), 1/sqrt(in)); B zero) or "gaussian" (A normal with std 1/r; B zero).
enum class AdapterInit { KaimingUniform, Gaussian };

// What the model needs of a LoRA run (resolved from the run's LoraConfig).
struct LoraOptions {
  int64_t r = 0;         // 0: no adapters
  float scaling = 1.0f;  // lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora
  float dropout = 0.0f;
  AdapterInit init = AdapterInit::KaimingUniform;
  // PEFT's names: a module path suffix ("q_proj", "c_attn", "mlp.c_proj") or "all-linear".
  std::vector<std::string> target_modules;
  // PEFT's bias: None, All (every bias of the model trained) or LoraOnly (the biases of the
  // adapted linears). The trained biases are copies in the trainable units (below), so the
  // frozen base keeps no gradient, master or optimizer state.
  LoraBias bias = LoraBias::None;
  // PEFT's modules_to_save, resolved (other modules are refused by lora_model_options):
  // each a full trained copy beside the adapters, the frozen base's tensor untouched. As
  // PEFT's copies do, a copy of a tied head or embedding unties them: a head copy is a head
  // of its own while the embedding stays the base's, an embedding copy feeds the input
  // while the head keeps reading the base's embedding.
  std::vector<SavedModule> modules_to_save;
  bool saves(SavedModule m) const;
  bool enabled() const { return r > 0; }
};

// What the model needs of a run's LoraConfig for a base of shape `model`: PEFT's targets
// resolved (a name the model lacks, a regex matching nothing: BadInput naming `source` and
// listing the modules it has), rank, scaling, dropout and init.
LoraOptions lora_model_options(const LoraConfig& lora, const ModelConfig& model, const std::string& source);

// One adapter: a PEFT module (one HF tensor of a block's linear field) and the logical
// output rows [row_begin, row_begin + rows) of the field it adds to.
struct LoraTarget {
  Field field = Field::QkvWeight;
  std::string module;  // HF module path, e.g. "model.layers.0.self_attn.q_proj"
  int64_t row_begin = 0, rows = 0;
  int64_t field_rows = 0;  // the field's whole output width
  int64_t in_features = 0;
  bool whole_field() const { return row_begin == 0 && rows == field_rows; }
};

// The adapters of block `layer`, in the order of the block's HF tensors. A module matches a
// target when its path equals it or ends with "." + target (PEFT's rule); "all-linear" is
// every linear of the block. BadInput when a target matches nothing, naming the modules the
// model has.
std::vector<LoraTarget> adapter_targets(const ModelConfig& config, const std::vector<std::string>& target_modules,
                                        int64_t layer);
// Every linear module name of a block (layer 0), for messages and `config check`.
std::vector<std::string> adapter_module_names(const ModelConfig& config);

// The unit "lora.<layer>": per target "<module>.lora_A.weight" [r, in] and
// "<module>.lora_B.weight" [rows, r] (PEFT's names without "base_model.model."), then the
// block's trained biases (bias all / lora_only) under the base's HF names and fields: a
// trainable copy the block reads instead of the frozen base's (lora_trained_weights); with
// lora_only, a packed bias field's other tensors as held copies (lora_held_copy).
std::vector<ParamSpec> lora_unit_specs(const ModelConfig& config, const LoraOptions& lora, int64_t layer);
std::string lora_unit_name(int64_t layer);
// With bias all on a model whose final norm has a bias (GPT-2's ln_f.bias): the unit
// "lora.final_norm" holding its trained copy; no specs otherwise (then no such unit).
std::vector<ParamSpec> lora_final_norm_specs(const ModelConfig& config, const LoraOptions& lora);
constexpr const char* kLoraFinalNormUnit = "lora.final_norm";
// With modules_to_save [lm_head]: the unit "lora.modules_to_save.lm_head" holding the trained
// copy of the head's weight, under HF's name "lm_head.weight" (a tied model's: the untied
// head's spec, starting from the token embedding's values: its source_name).
std::vector<ParamSpec> lora_lm_head_specs(const ModelConfig& config, const LoraOptions& lora);
constexpr const char* kLoraLmHeadUnit = "lora.modules_to_save.lm_head";
// With modules_to_save [embed_tokens] (GPT-2: [wte]): the unit
// "lora.modules_to_save.token_embedding" holding the trained copy of the token embedding,
// under the base's name.
std::vector<ParamSpec> lora_token_embedding_specs(const ModelConfig& config, const LoraOptions& lora);
constexpr const char* kLoraTokenEmbeddingUnit = "lora.modules_to_save.token_embedding";
// The layer of an adapter unit "lora.<l>"; -1 for the units of trained copies
// ("lora.final_norm", "lora.modules_to_save.*").
int64_t lora_unit_layer(const Unit& unit);
// Whether `unit` holds adapters or trained copies ("lora.<l>", "lora.final_norm"), not
// base-model tensors of the HF files.
bool is_lora_unit(const Unit& unit);
// Whether a spec of an adapter unit is a trained copy of a base tensor (a bias, a module of
// modules_to_save), not A/B.
bool is_trained_base_copy(const ParamSpec& spec);
// Whether a copy in `unit` is held rather than trained: bias lora_only, a bias no adapter
// wraps, kept because another tensor packed in its field is trained (Qwen2's q/k/v biases
// with k_proj adapted alone: the block reads [q; k; v] as one view). It gets no gradient,
// stays at the base's values and is not saved (PEFT trains only the adapted layers' biases).
bool lora_held_copy(const Unit& unit, const ParamSpec& spec, LoraBias bias);
// Whether `hf_name` (a trained bias) belongs to a linear the adapters of `unit` wrap (PEFT
// then names it "<module>.base_layer.bias").
bool wrapped_by_adapter(const Unit& unit, const std::string& hf_name);

// The trained copies of an adapter unit, field by field (values or gradients; undefined
// where the unit trains no such field): the block (or final norm) reads them in place of the
// frozen base's views.
UnitWeights lora_trained_weights(const Unit& unit, Storage storage);
// `base` with every field `trained` defines taken from it.
UnitWeights with_trained(const UnitWeights& base, const UnitWeights& trained);

// One adapter's tensors: values (a, b) and gradients (da, db; undefined without a buffer).
struct AdapterViews {
  LoraTarget target;
  Tensor a, b, da, db;
};

// Scratch shared by every layer (flat buffers, cut to shape at use): the parallel
// linear's (parallel/linear.h). The products read and add to the adapters' columns of the
// packed outputs in place (ops::gemm), so nothing of a field's full width is staged.
using LoraScratch = parallel::LoraScratch;

// Rows [row_begin, row_begin + rows) of a bias field's trained view that a held copy covers.
struct HeldRows {
  Field bias = Field::QkvBias;
  int64_t row_begin = 0, rows = 0;
};

// The adapters of one block for block_forward/backward (model/block.h).
struct BlockLora {
  const LoraOptions* options = nullptr;
  std::vector<AdapterViews> adapters;
  UnitWeights trained_values, trained_grads;  // the block's trained biases (lora_trained_weights)
  std::vector<HeldRows> held;                 // their held copies' rows: gradients zeroed (lora_held_copy)
  LoraScratch scratch;
  uint64_t seed = 0, step = 0;  // dropout masks: (seed, step, layer, adapter)
  bool train = true;            // false: no dropout (evaluation)
};
BlockLora block_lora(const LoraOptions& options, const ModelConfig& config, const Unit& unit, int64_t layer);

// Scratch sizes for N rows (elements of each flat buffer, by LoraScratch member order).
struct LoraScratchSizes {
  int64_t xd = 0, h = 0;
};
LoraScratchSizes lora_scratch_sizes(const ModelConfig& config, const LoraOptions& lora, int64_t N);

// The dropout mask stream of adapter `index` of block `layer` (apart from the residual
// dropout's, block.h's dropout_rng).
Philox lora_dropout_rng(uint64_t seed, uint64_t step, int layer, size_t index);

// The adapters of `field` (and the held rows of its bias) as the parallel linear carries
// them (parallel/linear.h), in block order, each with its dropout stream. Empty without
// options.
parallel::LinearLora linear_lora(const BlockLora& lora, int layer, Field field);

// y (+=) the adapters of `field` on input x [N, in] into the field's output y [N, out].
void lora_forward(const BlockLora& lora, int layer, Field field, const Tensor& x, const Tensor& y);
// dA, dB (+=) and dx (+=) from dy [N, out], the gradient of the field's output.
void lora_backward(const BlockLora& lora, int layer, Field field, const Tensor& x, const Tensor& dy, const Tensor& dx);

}  // namespace zt::model
