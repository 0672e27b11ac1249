#include "model/transformer.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "model/weights.h"
#include "ops/copy.h"
#include "ops/random.h"

namespace zt::model {

int64_t count_targets(const Tensor& targets, int ignore_index) {
  const int32_t* t = targets.data_as<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += t[i] != ignore_index;
  return n;
}

ModelOptions host_staging_options(ModelOptions options) {
  options.device = Device::cpu();
  options.activation_dtype = DType::F32;
  options.allocate_grads = false;
  options.allocate_params = true;
  return options;
}

Transformer::Transformer(ModelConfig config, ModelOptions options) : config_(std::move(config)), options_(options) {
  config_.validate("model config");
  if (options_.activation_dtype != DType::F32 && !options_.device.is_cuda())
    ZT_THROW_UNSUPPORTED("activations in ", dtype_name(options_.activation_dtype),
                         " need the GPU backend; on the CPU they are f32");
  const ModelConfig& c = config_;
  add_model_units(registry_, c, options_.shard_count);
  if (options_.lora.enabled()) {
    ZT_CHECK(options_.lora.r > 0, "lora r must be positive");
    // The base is frozen; each block's adapters are a trainable unit of their own.
    for (auto& u : registry_.units()) u->set_training(Training::Frozen);
    for (int64_t l = 0; l < c.num_layers; ++l)
      registry_.add_unit(lora_unit_name(l), lora_unit_specs(c, options_.lora, l), options_.shard_count);
    const std::vector<ParamSpec> final_norm = lora_final_norm_specs(c, options_.lora);
    if (!final_norm.empty()) registry_.add_unit(kLoraFinalNormUnit, final_norm, options_.shard_count);
    const std::vector<ParamSpec> lm_head = lora_lm_head_specs(c, options_.lora);
    if (!lm_head.empty()) registry_.add_unit(kLoraLmHeadUnit, lm_head, options_.shard_count);
    const std::vector<ParamSpec> token_embedding = lora_token_embedding_specs(c, options_.lora);
    if (!token_embedding.empty()) registry_.add_unit(kLoraTokenEmbeddingUnit, token_embedding, options_.shard_count);
  }
  for (auto& u : registry_.units()) {
    u->set_storage(options_.param_dtype, options_.grad_dtype, options_.device);
    if (options_.allocate_params) u->allocate_params(options_.param_dtype, options_.device);
    if (options_.allocate_grads && !u->frozen()) u->allocate_grads(options_.grad_dtype, options_.device);
  }
  stage_ = std::make_unique<ModelStage>(config_, options_, registry_, StageSpec::whole(config_));
  if (c.attn_pdrop > 0.0f)
    ZT_DEBUG("attn_pdrop=", c.attn_pdrop, " is not applied: the fused attention has no probability dropout");
}

Transformer::~Transformer() = default;

void Transformer::init_weights(uint64_t seed) {
  for (auto& u : registry_.units()) init_unit_weights(*u, seed);
}

void Transformer::init_unit_slice(Unit& unit, uint64_t seed, int64_t begin, const Tensor& out) {
  if (!unit.has_params()) {
    unit.allocate_params(unit.param_dtype(), unit.device());
    init_unit_weights(unit, seed);
  }
  ops::copy(out, unit.flat_params().narrow(0, begin, out.numel()));
}

void Transformer::init_unit_weights(Unit& unit, uint64_t seed) {
  for (ParamEntry& p : unit.params()) {
    const Tensor& value = p.value;
    switch (p.spec.init) {
      case Init::Zeros:
        value.zero();
        break;
      case Init::Ones:
        if (value.device().is_cpu()) {
          value.fill_f32(1.0f);
        } else {
          OwnedTensor ones(p.spec.shape, value.dtype());
          ones.view().fill_f32(1.0f);
          ops::copy(value, ones);
        }
        break;
      case Init::KaimingUniform: {
        // Drawn on the host (a LoRA A matrix: small), the same bits on every device.
        const float bound = 1.0f / std::sqrt(static_cast<float>(p.spec.shape.at(1)));
        OwnedTensor host(p.spec.shape, DType::F32);
        fill_uniform(host, Philox(seed, hash_name(p.name().c_str())), -bound, bound);
        ops::copy(value, host);
        break;
      }
      case Init::Normal:
        // Drawn where the parameter lives, the same bits on every device (ops/random.h):
        // a 1.5B-parameter model drawn on the host took ~4 s before its first GPU step.
        value.zero();  // vocab padding rows stay zero
        ops::fill_normal(value.narrow(0, 0, p.spec.hf_shape[0]), Philox(seed, hash_name(p.spec.value_source().c_str())),
                         0.0f, p.spec.init_std);
        break;
    }
  }
}

void Transformer::zero_grads() {
  for (auto& u : registry_.units())
    if (u->has_grads()) u->flat_grads().zero();
}

void Transformer::set_checkpointing(Checkpointing c) {
  if (c != options_.checkpointing) stage_->reset_activations();
  options_.checkpointing = c;
}

ops::CrossEntropyResult Transformer::forward(const Tensor& tokens, const Tensor& targets,
                                             const Tensor& segment_starts) {
  StageInput in;
  in.tokens = tokens;
  in.targets = targets;
  in.segment_starts = segment_starts;
  in.head = HeadWork::Loss;
  stage_->forward(0, in);
  return stage_->loss(0);
}

void Transformer::forward_logits(const Tensor& tokens, const Tensor& logits) {
  const int64_t N = tokens.numel(), V = config_.vocab_size;
  ZT_CHECK(logits.numel() == N * V && logits.dtype() == DType::F32, "logits must be f32 [B, T, V]");
  StageInput in;
  in.tokens = tokens;
  in.head = HeadWork::Logits;
  in.logits = logits;
  stage_->forward(0, in);
}

ops::CrossEntropyResult Transformer::forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale,
                                                      const Tensor& segment_starts) {
  StageInput in;
  in.tokens = tokens;
  in.targets = targets;
  in.segment_starts = segment_starts;
  in.head = HeadWork::Deferred;
  stage_->forward(0, in);
  return stage_->backward_from_loss(0, grad_scale);
}

}  // namespace zt::model
