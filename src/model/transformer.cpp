#include "model/transformer.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "model/block.h"
#include "model/weights.h"
#include "ops/copy.h"
#include "ops/random.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/attention.h"
#include "ops/rope.h"

namespace zt::model {

int64_t count_targets(const Tensor& targets, int ignore_index) {
  const int32_t* t = targets.data_as<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += t[i] != ignore_index;
  return n;
}

struct LayerActs {
  OwnedTensor x_mid;  // residual stream after the attention branch [N, C]
  // The normalised inputs of the two branches are not kept: the forward writes them to the
  // shared scratch Activations::ln and the backward recomputes them there from the block
  // input / x_mid and these statistics (one memory-bound kernel each, ~1% of a step, for
  // 2 N C activations per layer: 4.7 GiB on gpt2-xl at B=16).
  OwnedTensor ln1_mean, ln1_rstd;
  OwnedTensor qkv;  // after RoPE [N, (Hq + 2 Hkv) D]
  OwnedTensor att;  // [N, Hq D]
  OwnedTensor lse;  // [B, Hq, T]
  OwnedTensor ln2_mean, ln2_rstd;
  OwnedTensor fc;   // Gelu: pre-GELU [N, F]; GatedSilu: [gate | up] [N, 2F]
  OwnedTensor act;  // [N, F]
  BlockActivations views() const { return {x_mid, ln1_mean, ln1_rstd, qkv, att, lse, ln2_mean, ln2_rstd, fc, act}; }
};

struct Transformer::Activations {
  int64_t B = 0, T = 0;
  std::vector<OwnedTensor> x;     // residual stream at each block input, and the trunk output
  std::vector<LayerActs> layers;  // one per layer, or one shared when checkpointing
  // Checkpointing: each layer's attention output [N, Hq D] and lse [B, Hq, T], kept from
  // the forward so the recompute runs no attention (the shared LayerActs' att/lse unused).
  std::vector<OwnedTensor> saved_att, saved_lse;
  OwnedTensor lnf, lnf_mean, lnf_rstd;
  // Backward scratch.
  OwnedTensor dx, d_ln, d_branch, d_qkv, d_att, d_fc, d_act, proj;
  OwnedTensor ln;  // [N, C] the normalised input of the branch being computed (see LayerActs)
  ops::RopeTable rope;
  // A model on the GPU reads host token ids from device copies.
  OwnedTensor tokens, targets;
  // Packed samples of this step (set_packed_samples): sample starts and positions within the
  // samples (views on the model's device: a GPU model's copies live in the slots), and the
  // rope rows per token. Undefined views: no packing. Not in activation_bytes (i32 [B, T]
  // twice, and 4 B T D bytes of rope rows, beside the layers' activations).
  OwnedTensor segment_slot, position_slot, host_positions;
  Tensor segment_starts, positions;
  ops::RopeTable token_rope;
  // LoRA's scratch (model/lora.h's LoraScratch), shared by every layer; not in
  // activation_bytes (r-wide, or one layer's input, beside the layers' activations).
  OwnedTensor lora_xd, lora_dxd, lora_h, lora_dh;
  BlockScratch scratch() const { return {ln, proj}; }
  BlockGradScratch grad_scratch() const { return {d_ln, d_branch, d_qkv, d_att, d_fc, d_act}; }
};

// ids on the model's device: as given when already there, else copied into `slot`.
static Tensor ids_on(Device dev, const Tensor& ids, OwnedTensor& slot) {
  if (ids.device() == dev) return ids;
  if (slot->shape() != ids.shape()) slot = OwnedTensor(ids.shape(), ids.dtype(), dev);
  ops::copy(slot, ids);
  return slot.view();
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

// Gradient buffers exist from construction, or (ZeRO 2-3) from the unit's before_backward hook.
static void require_grads(const Unit& u) {
  ZT_CHECK(u.has_grads(), "backward of unit ", u.name(), " without a gradient buffer");
}

Tensor Transformer::head_weight() {
  if (Unit* copy = lora_copy_unit(kLoraLmHeadUnit)) return lora_trained_weights(*copy, Storage::Values)[Field::LmHead];
  return head_matrix(config_, UnitWeights(embed_unit(registry_), Storage::Values),
                     UnitWeights(head_unit(registry_), Storage::Values));
}

Tensor Transformer::head_weight_grad() {
  if (Unit* copy = lora_copy_unit(kLoraLmHeadUnit)) return lora_trained_weights(*copy, Storage::Grads)[Field::LmHead];
  return head_matrix(config_, UnitWeights(embed_unit(registry_), Storage::Grads),
                     UnitWeights(head_unit(registry_), Storage::Grads));
}

Unit* Transformer::lora_unit(int layer) {
  if (!options_.lora.enabled()) return nullptr;
  return &registry_.unit(static_cast<size_t>(config_.num_layers) + 2 + static_cast<size_t>(layer));
}

Unit* Transformer::lora_copy_unit(const char* name) {
  if (!options_.lora.enabled()) return nullptr;
  // After the adapter units: at most three, so a scan.
  for (size_t i = 2 * static_cast<size_t>(config_.num_layers) + 2; i < registry_.size(); ++i)
    if (registry_.unit(i).name() == name) return &registry_.unit(i);
  return nullptr;
}

Unit* Transformer::lora_final_norm_unit() { return lora_copy_unit(kLoraFinalNormUnit); }

bool Transformer::head_reads_embedding() {
  return config_.tie_word_embeddings && lora_copy_unit(kLoraLmHeadUnit) == nullptr;
}

UnitWeights Transformer::input_embedding_weights(Storage storage) {
  const UnitWeights base(embed_unit(registry_), storage);
  Unit* copy = lora_copy_unit(kLoraTokenEmbeddingUnit);
  return copy ? with_trained(base, lora_trained_weights(*copy, storage)) : base;
}

BlockLora Transformer::block_lora_views(int layer) {
  BlockLora b = block_lora(options_.lora, config_, *lora_unit(layer), layer);
  const Activations& s = *acts_;
  b.scratch = {s.lora_xd, s.lora_dxd, s.lora_h, s.lora_dh};
  b.seed = dropout_seed_;
  b.step = dropout_step_;
  b.train = mode_ == Mode::Train;
  return b;
}

Philox Transformer::embed_dropout_rng() const { return dropout_rng(dropout_seed_, dropout_step_, -1, 0); }

BlockCall Transformer::block_call(int layer) const {
  BlockCall call;
  call.layer = layer;
  call.batch = acts_->B;
  call.tokens = acts_->T;
  call.rope = &acts_->rope;
  if (acts_->segment_starts.has_data()) {
    call.segment_starts = &acts_->segment_starts;
    call.rope = &acts_->token_rope;
  }
  if (mode_ == Mode::Train) call.dropout = {config_.resid_pdrop, dropout_seed_, dropout_step_};
  return call;
}

BlockActivations Transformer::layer_acts(int layer) const {
  const Activations& s = *acts_;
  if (s.saved_att.empty()) return s.layers[static_cast<size_t>(layer)].views();
  BlockActivations a = s.layers[0].views();
  a.att = s.saved_att[static_cast<size_t>(layer)];
  a.lse = s.saved_lse[static_cast<size_t>(layer)];
  return a;
}

void Transformer::set_checkpointing(Checkpointing c) {
  if (c != options_.checkpointing) acts_.reset();
  options_.checkpointing = c;
}

int64_t activation_bytes(const ModelConfig& c, DType activation_dtype, Checkpointing checkpointing, int64_t B,
                         int64_t T) {
  // Element counts as ensure_activations allocates them (below).
  const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size, HD = c.num_heads * c.head_dim;
  const int64_t L = c.num_layers, lse = B * c.num_heads * T;
  const int64_t layer_sets = checkpointing == Checkpointing::EveryBlock ? 1 : L;
  int64_t a = (L + 1) * N * C;                                       // x: block inputs and the trunk output
  a += layer_sets * N * (C + c.qkv_width() + c.mlp_in_width() + F);  // x_mid, qkv, fc, act
  a += L * N * HD;                                                   // att (checkpointing: saved_att)
  int64_t f32 = layer_sets * 4 * N + L * lse;                        // norm statistics; lse (or saved_lse)
  a += N * C;                                                        // lnf
  f32 += 2 * N;                                                      // lnf_mean, lnf_rstd
  a += 5 * N * C;                                                    // dx, d_ln, d_branch, proj, ln
  a += N * (c.qkv_width() + HD + c.mlp_in_width() + F);              // d_qkv, d_att, d_fc, d_act
  int64_t bytes = a * static_cast<int64_t>(dtype_size(activation_dtype)) + f32 * 4;
  if (c.position == PositionKind::Rotary) bytes += 2 * T * (c.head_dim / 2) * 4;  // cos and sin tables (f32)
  return bytes;
}

int64_t Transformer::allocated_activation_bytes() const {
  if (!acts_) return 0;
  int64_t bytes = 0;
  auto add = [&](const OwnedTensor& t) {
    if (t->has_data()) bytes += static_cast<int64_t>(t->nbytes());
  };
  const Activations& a = *acts_;
  for (const OwnedTensor& t : a.x) add(t);
  for (const LayerActs& l : a.layers)
    for (const OwnedTensor* t :
         {&l.x_mid, &l.ln1_mean, &l.ln1_rstd, &l.qkv, &l.att, &l.lse, &l.ln2_mean, &l.ln2_rstd, &l.fc, &l.act})
      add(*t);
  for (const OwnedTensor& t : a.saved_att) add(t);
  for (const OwnedTensor& t : a.saved_lse) add(t);
  for (const OwnedTensor* t : {&a.lnf, &a.lnf_mean, &a.lnf_rstd, &a.dx, &a.d_ln, &a.d_branch, &a.d_qkv, &a.d_att,
                               &a.d_fc, &a.d_act, &a.proj, &a.ln, &a.rope.cos, &a.rope.sin})
    add(*t);
  return bytes;
}

void Transformer::ensure_activations(int64_t B, int64_t T) {
  if (acts_ && acts_->B == B && acts_->T == T) return;
  const ModelConfig& c = config_;
  if (T > c.max_position_embeddings)
    ZT_THROW_INPUT("sequence length ", T, " exceeds the model's max_position_embeddings (", c.max_position_embeddings,
                   "): use shorter sequences");
  const Device dev = options_.device;
  const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t HD = c.num_heads * c.head_dim;
  auto act = std::make_unique<Activations>();
  act->B = B;
  act->T = T;
  // Activations in the model's activation dtype (bf16 on the GPU for speed); the saved
  // normalisation statistics and log-sum-exps stay f32.
  auto act_t = [&](Shape s) { return OwnedTensor(std::move(s), options_.activation_dtype, dev); };
  auto f32 = [&](Shape s) { return OwnedTensor(std::move(s), DType::F32, dev); };
  for (int64_t i = 0; i <= c.num_layers; ++i) act->x.push_back(act_t({N, C}));
  const bool checkpointing = options_.checkpointing == Checkpointing::EveryBlock;
  const int64_t n_layer_acts = checkpointing ? 1 : c.num_layers;
  for (int64_t i = 0; i < n_layer_acts; ++i) {
    LayerActs a;
    a.x_mid = act_t({N, C});
    a.ln1_mean = f32({N});
    a.ln1_rstd = f32({N});
    a.qkv = act_t({N, c.qkv_width()});
    if (!checkpointing) {
      a.att = act_t({N, HD});
      a.lse = f32({B, c.num_heads, T});
    }
    a.ln2_mean = f32({N});
    a.ln2_rstd = f32({N});
    a.fc = act_t({N, c.mlp_in_width()});
    a.act = act_t({N, F});
    act->layers.push_back(std::move(a));
  }
  for (int64_t i = 0; checkpointing && i < c.num_layers; ++i) {
    act->saved_att.push_back(act_t({N, HD}));
    act->saved_lse.push_back(f32({B, c.num_heads, T}));
  }
  act->lnf = act_t({N, C});
  act->lnf_mean = f32({N});
  act->lnf_rstd = f32({N});
  act->dx = act_t({N, C});
  act->d_ln = act_t({N, C});
  act->d_branch = act_t({N, C});
  act->proj = act_t({N, C});
  act->ln = act_t({N, C});
  act->d_qkv = act_t({N, c.qkv_width()});
  act->d_att = act_t({N, HD});
  act->d_fc = act_t({N, c.mlp_in_width()});
  act->d_act = act_t({N, F});
  if (c.position == PositionKind::Rotary) act->rope = ops::make_rope_table(c.rope, static_cast<int>(T), dev);
  if (options_.lora.enabled()) {
    const LoraScratchSizes z = lora_scratch_sizes(c, options_.lora, N);
    auto flat = [&](int64_t n, DType dt) { return OwnedTensor({std::max<int64_t>(n, 1)}, dt, dev); };
    act->lora_xd = flat(z.xd, options_.activation_dtype);
    act->lora_dxd = flat(z.xd, options_.activation_dtype);
    act->lora_h = flat(z.h, options_.activation_dtype);
    act->lora_dh = flat(z.h, options_.activation_dtype);
  }
  acts_ = std::move(act);
}

void Transformer::set_packed_samples(const Tensor& host_segments) {
  Activations& s = *acts_;
  s.segment_starts = Tensor();
  s.positions = Tensor();
  if (!host_segments.has_data()) return;
  const int64_t B = s.B, T = s.T;
  ZT_CHECK(host_segments.device().is_cpu() && host_segments.dtype() == DType::I32 && host_segments.dim() == 2 &&
               host_segments.size(0) == B && host_segments.size(1) == T && host_segments.is_contiguous(),
           "segment_starts must be a contiguous host i32 [", B, ", ", T, "] tensor, got ",
           shape_str(host_segments.shape()));
  ops::check_segment_starts(host_segments, B, T);
  if (s.host_positions->shape() != host_segments.shape()) s.host_positions = OwnedTensor({B, T}, DType::I32);
  const int32_t* start = host_segments.data_as<int32_t>();
  int32_t* pos = s.host_positions.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>(i % T) - start[i];  // HF's position_ids
  s.segment_starts = ids_on(options_.device, host_segments, s.segment_slot);
  s.positions = ids_on(options_.device, s.host_positions, s.position_slot);
  if (config_.position == PositionKind::Rotary) make_token_rope_table(s.token_rope, s.rope, s.positions);
}

void Transformer::forward_trunk(const Tensor& host_tokens, const Tensor& host_segments) {
  ZT_CHECK(host_tokens.dim() == 2 && host_tokens.dtype() == DType::I32, "tokens must be i32 [B, T]");
  const ModelConfig& c = config_;
  const int64_t B = host_tokens.size(0), T = host_tokens.size(1);
  ensure_activations(B, T);
  set_packed_samples(host_segments);
  const Tensor tokens = ids_on(options_.device, host_tokens, acts_->tokens);
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  Activations& s = *acts_;

  Unit& embed = embed_unit(registry_);
  Unit* embedding_copy = lora_copy_unit(kLoraTokenEmbeddingUnit);
  hooks.before_forward(embed);
  if (embedding_copy) hooks.before_forward(*embedding_copy);
  const Tensor x0 = s.x[0]->reshape({B, T, c.hidden_size});
  if (s.positions.has_data())
    embed_forward_at(c, input_embedding_weights(Storage::Values), x0, tokens, s.positions, s.proj);
  else
    embed_forward(c, input_embedding_weights(Storage::Values), x0, tokens, 0);
  if (mode_ == Mode::Train && c.embd_pdrop > 0.0f) ops::dropout_forward(x0, x0, c.embd_pdrop, embed_dropout_rng());
  if (embedding_copy) hooks.after_forward(*embedding_copy);
  if (!head_reads_embedding()) hooks.after_forward(embed);

  for (int l = 0; l < c.num_layers; ++l) {
    Unit& u = block_unit(registry_, l);
    Unit* adapters = lora_unit(l);
    hooks.before_forward(u);
    if (adapters) hooks.before_forward(*adapters);
    BlockCall call = block_call(l);
    const BlockLora lora = adapters ? block_lora_views(l) : BlockLora();
    if (adapters) call.lora = &lora;
    const UnitWeights base(u, Storage::Values);
    block_forward(c, adapters ? with_trained(base, lora.trained_values) : base, call, layer_acts(l), s.scratch(),
                  s.x[static_cast<size_t>(l)], s.x[static_cast<size_t>(l) + 1]);
    if (adapters) hooks.after_forward(*adapters);
    hooks.after_forward(u);
  }

  Unit& head = head_unit(registry_);
  hooks.before_forward(head);
  Unit* trained_norm = lora_final_norm_unit();
  if (trained_norm) hooks.before_forward(*trained_norm);
  final_norm_forward(c, final_norm_weights(Storage::Values), s.lnf, s.lnf_mean, s.lnf_rstd, s.x.back());
  if (trained_norm) hooks.after_forward(*trained_norm);
}

UnitWeights Transformer::final_norm_weights(Storage storage) {
  const UnitWeights base(head_unit(registry_), storage);
  Unit* trained_norm = lora_final_norm_unit();
  return trained_norm ? with_trained(base, lora_trained_weights(*trained_norm, storage)) : base;
}

ops::CrossEntropyResult Transformer::forward(const Tensor& tokens, const Tensor& host_targets,
                                             const Tensor& segment_starts) {
  forward_trunk(tokens, segment_starts);
  const Tensor targets = ids_on(options_.device, host_targets, acts_->targets);
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  Unit* head_copy = lora_copy_unit(kLoraLmHeadUnit);
  if (head_copy) hooks.before_forward(*head_copy);
  ops::CrossEntropyResult r = ops::lm_head_cross_entropy_forward(
      acts_->lnf, head_weight(), targets.reshape({targets.numel()}), config_.vocab_size, kIgnoreIndex, Tensor());
  if (head_copy) hooks.after_forward(*head_copy);
  hooks.after_forward(head_unit(registry_));
  if (head_reads_embedding()) hooks.after_forward(embed_unit(registry_));
  return r;
}

void Transformer::forward_logits(const Tensor& tokens, const Tensor& logits) {
  const int64_t N = tokens.numel(), V = config_.vocab_size;
  ZT_CHECK(logits.numel() == N * V && logits.dtype() == DType::F32, "logits must be f32 [B, T, V]");
  forward_trunk(tokens);
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  Unit* head_copy = lora_copy_unit(kLoraLmHeadUnit);
  if (head_copy) hooks.before_forward(*head_copy);
  ops::linear_forward(logits.reshape({N, V}), acts_->lnf, head_weight().narrow(0, 0, V), Tensor());
  if (head_copy) hooks.after_forward(*head_copy);
  hooks.after_forward(head_unit(registry_));
  if (head_reads_embedding()) hooks.after_forward(embed_unit(registry_));
}

ops::CrossEntropyResult Transformer::forward_backward(const Tensor& host_tokens, const Tensor& host_targets,
                                                      float grad_scale, const Tensor& segment_starts) {
  const ModelConfig& c = config_;
  const bool recompute = options_.checkpointing == Checkpointing::EveryBlock;
  forward_trunk(host_tokens, segment_starts);
  Activations& s = *acts_;
  // forward_trunk already brought the token ids to the model's device.
  const Tensor tokens = host_tokens.device() == options_.device ? host_tokens : s.tokens.view();
  const Tensor targets = ids_on(options_.device, host_targets, s.targets);
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  const int64_t B = s.B, T = s.T, N = B * T;

  // Head: loss and its gradient in one pass; s.d_ln receives d(final norm output).
  Unit& head = head_unit(registry_);
  Unit& embed = embed_unit(registry_);
  hooks.after_forward(head);
  hooks.before_backward(head);
  if (head_reads_embedding()) hooks.before_backward(embed);  // the head's weight lives there
  if (!head.frozen()) require_grads(head);
  if (head_reads_embedding() && !embed.frozen()) require_grads(embed);
  Unit* head_copy = lora_copy_unit(kLoraLmHeadUnit);
  if (head_copy) {
    hooks.before_backward(*head_copy);
    require_grads(*head_copy);
  }
  const ops::CrossEntropyResult r = ops::lm_head_cross_entropy_forward_backward(
      s.d_ln, head_weight_grad(), s.lnf, head_weight(), targets.reshape({N}), c.vocab_size, kIgnoreIndex, grad_scale);
  if (head_copy) hooks.after_backward(*head_copy);
  Unit* trained_norm = lora_final_norm_unit();
  if (trained_norm) {
    hooks.before_backward(*trained_norm);
    require_grads(*trained_norm);
  }
  final_norm_backward(c, final_norm_weights(Storage::Values), final_norm_weights(Storage::Grads), s.dx, s.d_ln,
                      s.x.back(), s.lnf_mean, s.lnf_rstd);
  if (trained_norm) {
    hooks.after_backward(*trained_norm);
  }
  hooks.after_backward(head);

  for (int l = static_cast<int>(c.num_layers) - 1; l >= 0; --l) {
    Unit& u = block_unit(registry_, l);
    Unit* adapters = lora_unit(l);
    hooks.before_backward(u);
    if (adapters) hooks.before_backward(*adapters);
    if (!u.frozen()) require_grads(u);
    if (adapters) require_grads(*adapters);
    BlockCall call = block_call(l);
    const BlockLora lora = adapters ? block_lora_views(l) : BlockLora();
    const UnitWeights base(u, Storage::Values);
    const UnitWeights w = adapters ? with_trained(base, lora.trained_values) : base;
    if (adapters) call.lora = &lora;
    const BlockActivations a = layer_acts(l);
    const Tensor& x_in = s.x[static_cast<size_t>(l)];
    if (recompute) {
      call.pass = BlockPass::Recompute;
      block_forward(c, w, call, a, s.scratch(), x_in, s.x[static_cast<size_t>(l) + 1]);
    }
    const UnitWeights g(u, Storage::Grads);
    block_backward(c, w, adapters ? with_trained(g, lora.trained_grads) : g, call, a, s.scratch(), s.grad_scratch(),
                   x_in, s.dx);
    if (adapters) hooks.after_backward(*adapters);
    hooks.after_backward(u);
  }

  if (!head_reads_embedding()) hooks.before_backward(embed);
  // LoRA: the frozen embedding takes no gradient; a trained copy of it (modules_to_save)
  // takes the token rows' gradient.
  Unit* embedding_copy = lora_copy_unit(kLoraTokenEmbeddingUnit);
  Unit& trained = embedding_copy ? *embedding_copy : embed;
  if (trained.frozen()) {  // nothing below the blocks is trained
    hooks.after_backward(embed);
    return r;
  }
  if (embedding_copy) hooks.before_backward(*embedding_copy);
  require_grads(trained);
  const Tensor dx3 = s.dx->reshape({B, T, c.hidden_size});
  if (mode_ == Mode::Train && c.embd_pdrop > 0.0f) ops::dropout_backward(dx3, dx3, c.embd_pdrop, embed_dropout_rng());
  const UnitWeights grads =
      embedding_copy ? lora_trained_weights(*embedding_copy, Storage::Grads) : UnitWeights(embed, Storage::Grads);
  embed_backward(c, grads, dx3, tokens, s.positions);
  if (embedding_copy) hooks.after_backward(*embedding_copy);
  hooks.after_backward(embed);
  return r;
}

}  // namespace zt::model
