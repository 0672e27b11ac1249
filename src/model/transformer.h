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
// after its forward and backward: the ZeRO engine gathers/releases and reduces there
// (model/unit_scope.h).
//
// The passes run on a model::ModelStage holding every block, the embedding and the head,
// with one activation slot (model/model_stage.h): a pipeline's stages are its other cases.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/block.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/model_stage.h"
#include "model/registry.h"
#include "ops/cross_entropy.h"

namespace zt::model {

// The same model on the host, for staging weights read from files before they are copied
// to the device: the CPU's f32 activations (a 16-bit GPU run's activation dtype is refused
// there) and no gradients.
ModelOptions host_staging_options(ModelOptions options);

// Number of targets that count towards the loss.
int64_t count_targets(const Tensor& targets, int ignore_index = kIgnoreIndex);

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

  void set_mode(Mode mode) { stage_->set_mode(mode); }
  // Dropout masks depend on (seed, step, layer, site) only.
  void set_dropout_seed(uint64_t seed, uint64_t step) { stage_->set_dropout_seed(seed, step); }
  void set_hooks(UnitHooks* hooks) { stage_->set_hooks(hooks); }
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
  int64_t allocated_activation_bytes() const { return stage_->allocated_activation_bytes(); }
  // The model as one stage with one slot: what the passes above run on, and what a
  // schedule's executor drives (pipeline/executor.h).
  ModelStage& stage() { return *stage_; }

 private:
  ModelConfig config_;
  ModelOptions options_;
  ParameterRegistry registry_;
  std::unique_ptr<ModelStage> stage_;  // over config_, options_ and registry_
};

}  // namespace zt::model
