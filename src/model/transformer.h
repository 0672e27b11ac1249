// The decoder-only transformer for training and evaluation, with explicit forward and
// backward. The block itself is model/block.h (shared with generation); the parameters come
// from the weights table (model/weights.h).
//
//   x = wte[tok] (+ wpe[t]);  per block (block.h);  loss = CE(final_norm(x) @ W_head^T)
//   (W_head = wte when tied)
//
// Gradient rule: parameter grads are accumulated (+=) across calls until zero_grads();
// activation grads are scratch. Activations live in f32 on the CPU backend.
//
// Units (the flat buffers of registry.h): "embed" (wte [+ wpe]), "block.0" .. "block.L-1",
// "head" (final norm [+ untied lm_head]), and with LoRA "lora.0" .. "lora.L-1" (frozen base). A UnitHooks object sees each unit before and
// after its forward and backward: the ZeRO engine gathers/releases and reduces there.
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
#include "ops/cross_entropy.h"

namespace zt::model {

struct LayerActs;
struct BlockActivations;

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

// The same model on the host, for staging weights read from files before they are copied
// to the device: the CPU's f32 activations (a 16-bit GPU run's activation dtype is refused
// there) and no gradients.
ModelOptions host_staging_options(ModelOptions options);

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(Unit&) {}
  virtual void after_forward(Unit&) {}
  virtual void before_backward(Unit&) {}
  virtual void after_backward(Unit&) {}
};

constexpr int kIgnoreIndex = -100;

// Number of targets that count towards the loss.
int64_t count_targets(const Tensor& targets, int ignore_index = kIgnoreIndex);

// The bytes of a training step's activation buffers for B x T tokens: what a Transformer
// allocates at its first step (the residual stream at every block input, each layer's
// saved tensors or, with checkpointing, one shared set plus each layer's attention output
// and log-sum-exp, the backward scratch), in the activation dtype, with the norm
// statistics and log-sum-exps in f32. The LM head's chunked logits are separate
// (lm_head_chunk_plan). Transformer::allocated_activation_bytes checks it.
int64_t activation_bytes(const ModelConfig& config, DType activation_dtype, Checkpointing checkpointing, int64_t B,
                         int64_t T);

class Transformer {
 public:
  Transformer(ModelConfig config, ModelOptions options);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  ParameterRegistry& registry() { return registry_; }
  const ParameterRegistry& registry() const { return registry_; }

  // HF-style initialisation, reproducible per parameter: parameter p is drawn from
  // Philox(seed, hash(p.name)), independent of units, shards and thread counts.
  void init_weights(uint64_t seed);
  // The same for one unit (allocated): the values init_weights gives its parameters.
  void init_unit_weights(Unit& unit, uint64_t seed);
  // Elements [begin, begin + out.numel()) of the unit's initialised flat buffer (the ZeRO-3
  // engine's slice); allocates and initialises the unit when it has no storage, and leaves
  // it allocated.
  void init_unit_slice(Unit& unit, uint64_t seed, int64_t begin, const Tensor& out);
  void zero_grads();

  void set_mode(Mode mode) { mode_ = mode; }
  // Dropout masks depend on (seed, step, layer, site) only.
  void set_dropout_seed(uint64_t seed, uint64_t step) {
    dropout_seed_ = seed;
    dropout_step_ = step;
  }
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  // Changes the activation layout: the next step allocates it anew.
  void set_checkpointing(Checkpointing c);

  // tokens, targets: i32 [B, T]. Loss only (no gradients, no saved activations).
  // segment_starts: packed samples (SFT packing), host i32 [B, T], for each token the index
  // in its row of its sample's first token (io::BatchLoader::next fills it): attention stays
  // inside each sample and positions restart at 0 at each sample start, as HF's packing with
  // position_ids (flash-attn varlen, TRL's padding_free). Undefined: each row one sequence.
  ops::CrossEntropyResult forward(const Tensor& tokens, const Tensor& targets,
                                  const Tensor& segment_starts = Tensor());
  // Forward and backward of L = grad_scale * sum of token losses; gradients accumulate.
  ops::CrossEntropyResult forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale,
                                           const Tensor& segment_starts = Tensor());
  // logits: f32 [B, T, vocab_size] (unpadded).
  void forward_logits(const Tensor& tokens, const Tensor& logits);
  // The bytes the step's activation buffers hold now (0 before the first step).
  int64_t allocated_activation_bytes() const;

 private:
  struct Activations;
  void ensure_activations(int64_t B, int64_t T);
  // Runs embedding + blocks (model/block.h); leaves the final normalised hidden state in acts_.
  void forward_trunk(const Tensor& tokens, const Tensor& segment_starts = Tensor());
  // This step's packed samples (or none): their starts and positions on the device, and the
  // per-token rope rows.
  void set_packed_samples(const Tensor& host_segment_starts);
  BlockCall block_call(int layer) const;
  BlockActivations layer_acts(int layer) const;  // views; att/lse per layer when checkpointing
  Tensor head_weight();
  Tensor head_weight_grad();
  // LoRA: block l's adapter unit and its views for the block (null options without LoRA).
  Unit* lora_unit(int layer);
  BlockLora block_lora_views(int layer);
  // LoRA with bias all on a final norm with a bias: its trained copy's unit; null otherwise.
  Unit* lora_final_norm_unit();
  // LoRA's unit of trained copies named `name` (kLoraFinalNormUnit, kLoraLmHeadUnit,
  // kLoraTokenEmbeddingUnit); null: none.
  Unit* lora_copy_unit(const char* name);
  // The final norm's views (values or gradients), its trained bias in place of the base's.
  UnitWeights final_norm_weights(Storage storage);
  // Whether the head's matrix is the embedding unit's token table (a tied head, not replaced
  // by LoRA's trained copy): the embedding unit then stays in place (ZeRO-3: gathered) from
  // the input through the head, and not otherwise.
  bool head_reads_embedding();
  // The embedding the input tokens read (values or gradients): LoRA's trained copy of the
  // token embedding (modules_to_save) in place of the base's; the head never reads it.
  UnitWeights input_embedding_weights(Storage storage);
  Philox embed_dropout_rng() const;

  ModelConfig config_;
  ModelOptions options_;
  ParameterRegistry registry_;
  std::unique_ptr<Activations> acts_;
  Mode mode_ = Mode::Train;
  uint64_t dropout_seed_ = 0;
  uint64_t dropout_step_ = 0;
  UnitHooks* hooks_ = nullptr;
  UnitHooks no_hooks_;
};

}  // namespace zt::model
