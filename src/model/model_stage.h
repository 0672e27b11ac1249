// A model stage: blocks [first, last) of a transformer, with the embedding when it holds
// block 0 (the first stage) and the final norm, head and loss when it holds the last block
// (the last stage), and N activation slots, one per micro-batch in flight.
//
//   forward(slot, in):        first stage: x = embed(tokens); later: x = in.hidden (copied)
//                             x = blocks(x); last stage: final_norm(x) (and the head's
//                             work: nothing in training, the loss or logits otherwise)
//   backward_from_loss(slot): the last stage: the loss and its gradient in one fused pass
//                             (L = grad_scale * sum of token losses), then down the blocks
//   backward(slot, dout):     other stages: from dL/d(output), down the blocks
//
// Each leaves its result in the slot: output(slot) is what the next stage takes,
// input_grad(slot) what the previous one takes (the first stage's goes into the embedding).
// Parameter gradients accumulate (+=) into the units, micro-batch after micro-batch, in
// the order the backwards run. model::Transformer is the one-stage, one-slot case; a
// pipeline runs one stage per rank (pipeline/schedule.h says in which order).
//
// A slot keeps what its backward reads from its forward: the residual stream, each layer's
// saved tensors (with checkpointing: the attention output and log-sum-exp only), the token
// ids and targets, the packed samples and the dropout seed and step of its micro-batch.
// Scratch the passes only write and read within one call is shared by the slots. All
// slots of a stage hold micro-batches of one shape; another shape reallocates them, which
// is refused while another slot's micro-batch is in flight (forwarded, not yet backwarded).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/block.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/registry.h"
#include "model/unit_scope.h"
#include "ops/cross_entropy.h"

namespace zt::model {

// EveryBlock: activation checkpointing, selective: each block keeps its input, its
// attention output and log-sum-exp (2 B T C bytes in 16 bit + 4 B H T); the backward
// recomputes the rest (norms, the q/k/v, attention-out and MLP-in GEMMs, the activation)
// but neither the attention nor the MLP-out GEMM (model/block.h, BlockPass::Recompute).
enum class Checkpointing { None, EveryBlock };
enum class Mode { Train, Eval };  // Train applies dropout

struct ModelOptions {
  DType param_dtype = DType::F32;
  DType grad_dtype = DType::F32;
  // Activations and their gradients: f32, or bf16 on the GPU (half the memory traffic).
  DType activation_dtype = DType::F32;
  Device device = Device::cpu();
  int shard_count = 1;  // units are padded to a multiple of this
  Checkpointing checkpointing = Checkpointing::None;
  bool allocate_grads = true;
  // false: units record their dtype and device but get no storage; the ZeRO-3 engine
  // allocates, fills and shards them one at a time, so the whole model never exists.
  bool allocate_params = true;
  // LoRA (model/lora.h): the base units are frozen (no gradients) and each block gets an
  // adapter unit "lora.<l>", after the head in the registry.
  LoraOptions lora;
};

constexpr int kIgnoreIndex = -100;

// The bytes of a training step's activation buffers for B x T tokens: what a Transformer
// allocates at its first step (the residual stream at every block input, each layer's
// saved tensors or, with checkpointing, one shared set plus each layer's attention output
// and log-sum-exp, the backward scratch), in the activation dtype, with the norm
// statistics and log-sum-exps in f32. The LM head's chunked logits are separate
// (lm_head_chunk_plan). Transformer::allocated_activation_bytes checks it.
int64_t activation_bytes(const ModelConfig& config, DType activation_dtype, Checkpointing checkpointing, int64_t B,
                         int64_t T);

// Which blocks a stage runs, and how many micro-batches it holds at once.
struct StageSpec {
  int first_layer = 0;
  int last_layer = 0;  // exclusive
  int slots = 1;
  // The whole model in one stage (Transformer's).
  static StageSpec whole(const ModelConfig& config, int slots = 1);
};

// What the last stage does after the final norm.
enum class HeadWork {
  Deferred,  // training: nothing now; backward_from_loss computes the loss with its gradient
  Loss,      // evaluation: the loss (loss(slot)), no gradients
  Logits,    // the logits into StageInput::logits
};

// A forward's input. The tensors must stay valid until the slot's backward (token ids and
// targets already on the model's device are read there, not copied).
struct StageInput {
  Tensor tokens;          // i32 [B, T], host or the model's device: the first stage's input
  Tensor hidden;          // [B, T, C] in the activation dtype on the model's device: a later stage's input
  Tensor targets;         // i32 [B, T]: the last stage's (HeadWork Deferred and Loss)
  Tensor segment_starts;  // packed samples (Transformer::forward), host i32 [B, T], every stage; or undefined
  HeadWork head = HeadWork::Deferred;
  Tensor logits;  // HeadWork::Logits: f32 [B, T, vocab_size]
};

class ModelStage {
 public:
  // Runs over `registry`'s units with `config` and `options`, which must outlive it (a
  // Transformer's, or a pipeline rank's); reads options.checkpointing at every call.
  ModelStage(const ModelConfig& config, const ModelOptions& options, ParameterRegistry& registry, StageSpec spec);
  ~ModelStage();
  ModelStage(const ModelStage&) = delete;
  ModelStage& operator=(const ModelStage&) = delete;

  const StageSpec& spec() const { return spec_; }
  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  bool has_embedding() const { return spec_.first_layer == 0; }
  bool has_head() const;
  int slots() const { return spec_.slots; }

  // Mode, dropout seed and step are those of the micro-batch the next forward starts; a
  // slot keeps them for its backward. Dropout masks depend on (seed, step, layer, site).
  void set_mode(Mode mode) { mode_ = mode; }
  void set_dropout_seed(uint64_t seed, uint64_t step) {
    dropout_seed_ = seed;
    dropout_step_ = step;
  }
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  // Drops every slot's activations (the checkpointing layout changed): the next forward
  // allocates them anew.
  void reset_activations();

  void forward(int slot, const StageInput& in);
  // The last stage, after forward(slot) with HeadWork::Deferred: the loss and its gradient
  // (grad_scale * sum of token losses), then the blocks' and the embedding's backward.
  ops::CrossEntropyResult backward_from_loss(int slot, float grad_scale);
  // Other stages: dout [B, T, C] = dL/d(output(slot)) in the activation dtype (copied).
  void backward(int slot, const Tensor& dout);

  // The slot's output after forward [B, T, C] (not the last stage): the next stage's input.
  Tensor output(int slot) const;
  // The gradient of the slot's input after backward [B, T, C] (not the first stage).
  Tensor input_grad(int slot) const;
  // The loss of forward with HeadWork::Loss.
  const ops::CrossEntropyResult& loss(int slot) const;

  // The bytes the activation buffers hold now (0 before the first forward).
  int64_t allocated_activation_bytes() const;

 private:
  struct Slot;
  struct Scratch;
  Slot& slot(int index);
  const Slot& slot(int index) const;
  UnitHooks& hooks() { return hooks_ ? *hooks_ : no_hooks_; }
  // Shapes and allocation, the packed samples, the token ids, the micro-batch's dropout.
  Slot& start_forward(int index, const StageInput& in);
  void ensure_activations(Slot& s, int64_t B, int64_t T);
  void allocate_slot(Slot& s);
  void set_packed_samples(Slot& s, const Tensor& host_segment_starts);

  void embedding_forward(Slot& s);
  void layer_forward(Slot& s, int layer);
  void head_forward(Slot& s, const StageInput& in);
  ops::CrossEntropyResult head_backward(Slot& s, float grad_scale);
  void layers_backward(Slot& s);
  void layer_backward(Slot& s, int layer);
  void embedding_backward(Slot& s);

  BlockCall block_call(const Slot& s, int layer) const;
  BlockActivations layer_acts(const Slot& s, int layer) const;  // views; att/lse per layer when checkpointing
  const Tensor& x_at(const Slot& s, int layer) const;           // the input of `layer` (last_layer: the output)
  Tensor head_weight();
  Tensor head_weight_grad();
  // LoRA: block l's adapter unit and its views for the block (null options without LoRA).
  Unit* lora_unit(int layer);
  BlockLora block_lora_views(const Slot& s, int layer);
  // LoRA's unit of trained copies named `name` (kLoraFinalNormUnit, kLoraLmHeadUnit,
  // kLoraTokenEmbeddingUnit); null: none.
  Unit* lora_copy_unit(const char* name);
  // The final norm's views (values or gradients), its trained bias in place of the base's.
  UnitWeights final_norm_weights(Storage storage);
  // Whether the head's matrix is the embedding unit's token table (a tied head, not replaced
  // by LoRA's trained copy).
  bool head_reads_embedding();
  // A stage holding both ends with a tied head: the embedding unit then stays in place
  // (ZeRO-3: gathered) from the input through the head, and not otherwise.
  bool embedding_open_through_head();
  // The embedding the input tokens read (values or gradients): LoRA's trained copy of the
  // token embedding (modules_to_save) in place of the base's; the head never reads it.
  UnitWeights input_embedding_weights(Storage storage);
  Philox embed_dropout_rng(const Slot& s) const;

  const ModelConfig& config_;
  const ModelOptions& options_;
  ParameterRegistry& registry_;
  StageSpec spec_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<Scratch> scratch_;
  Mode mode_ = Mode::Train;
  uint64_t dropout_seed_ = 0;
  uint64_t dropout_step_ = 0;
  UnitHooks* hooks_ = nullptr;
  UnitHooks no_hooks_;
};

}  // namespace zt::model
