#include "model/model_stage.h"

#include <algorithm>

#include "core/error.h"
#include "model/weights.h"
#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/rope.h"

namespace zt::model {
namespace {

struct LayerActs {
  OwnedTensor x_mid;  // residual stream after the attention branch [N, C]
  // The normalised inputs of the two branches are not kept: the forward writes them to the
  // shared scratch Scratch::ln and the backward recomputes them there from the block
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

// ids on the model's device: as given when already there, else copied into `slot`.
Tensor ids_on(Device dev, const Tensor& ids, OwnedTensor& slot) {
  if (ids.device() == dev) return ids;
  if (slot->shape() != ids.shape()) slot = OwnedTensor(ids.shape(), ids.dtype(), dev);
  ops::copy(slot, ids);
  return slot.view();
}

// Gradient buffers exist from construction, or (ZeRO 2-3) from the unit's before_backward hook.
void require_grads(const Unit& u) {
  ZT_CHECK(u.has_grads(), "backward of unit ", u.name(), " without a gradient buffer");
}

}  // namespace

// What one micro-batch in flight keeps from its forward for its backward.
struct ModelStage::Slot {
  bool allocated = false;
  bool in_flight = false;         // forwarded for training, not yet backwarded
  std::vector<OwnedTensor> x;     // residual stream at each of the stage's block inputs, and its output
  std::vector<LayerActs> layers;  // one per layer of the stage (checkpointing: none, Scratch's)
  // Checkpointing: each layer's attention output [N, Hq D] and lse [B, Hq, T], kept from
  // the forward so the recompute runs no attention.
  std::vector<OwnedTensor> saved_att, saved_lse;
  OwnedTensor lnf, lnf_mean, lnf_rstd;  // the last stage's final norm
  // The gradient on its way down the stage: in the end that of the stage's input.
  OwnedTensor dx;
  // A model on the GPU reads host token ids from device copies.
  OwnedTensor token_copy, target_copy;
  Tensor tokens, targets;
  // Packed samples of this micro-batch (set_packed_samples): sample starts and positions
  // within the samples (views on the model's device: a GPU model's copies live in the
  // slots), and the rope rows per token. Undefined views: no packing. Not in
  // activation_bytes (i32 [B, T] twice, and 4 B T D bytes of rope rows).
  OwnedTensor segment_slot, position_slot, host_positions;
  Tensor segment_starts, positions;
  ops::RopeTable token_rope;
  // The micro-batch's mode and dropout (the stage's when its forward ran).
  Mode mode = Mode::Train;
  uint64_t dropout_seed = 0, dropout_step = 0;
  ops::CrossEntropyResult loss;  // HeadWork::Loss
};

// What the passes write and read within one call, shared by the slots (all of one shape).
struct ModelStage::Scratch {
  int64_t B = 0, T = 0;
  std::vector<LayerActs> recompute;  // checkpointing: the one set every layer's recompute rewrites
  OwnedTensor d_ln, d_branch, d_qkv, d_att, d_fc, d_act, proj;
  OwnedTensor ln;  // [N, C] the normalised input of the branch being computed (see LayerActs)
  ops::RopeTable rope;
  // LoRA's scratch (model/lora.h's LoraScratch), shared by every layer; not in
  // activation_bytes (r-wide, or one layer's input, beside the layers' activations).
  OwnedTensor lora_xd, lora_dxd, lora_h, lora_dh;
  BlockScratch block() const { return {ln, proj}; }
  BlockGradScratch grads() const { return {d_ln, d_branch, d_qkv, d_att, d_fc, d_act}; }
};

StageSpec StageSpec::whole(const ModelConfig& config, int slots) {
  return {0, static_cast<int>(config.num_layers), slots};
}

ModelStage::ModelStage(const ModelConfig& config, const ModelOptions& options, ParameterRegistry& registry,
                       StageSpec spec)
    : config_(config), options_(options), registry_(registry), spec_(spec) {
  ZT_CHECK(spec_.first_layer >= 0 && spec_.first_layer < spec_.last_layer && spec_.last_layer <= config_.num_layers,
           "model stage: blocks [", spec_.first_layer, ", ", spec_.last_layer, ") of a model of ", config_.num_layers);
  ZT_CHECK(spec_.slots >= 1, "model stage: ", spec_.slots, " activation slots");
  for (int i = 0; i < spec_.slots; ++i) slots_.push_back(std::make_unique<Slot>());
}

ModelStage::~ModelStage() = default;

bool ModelStage::has_head() const { return spec_.last_layer == config_.num_layers; }

ModelStage::Slot& ModelStage::slot(int index) {
  ZT_CHECK(index >= 0 && index < spec_.slots, "model stage: slot ", index, " of ", spec_.slots);
  return *slots_[static_cast<size_t>(index)];
}

const ModelStage::Slot& ModelStage::slot(int index) const {
  ZT_CHECK(index >= 0 && index < spec_.slots, "model stage: slot ", index, " of ", spec_.slots);
  return *slots_[static_cast<size_t>(index)];
}

void ModelStage::reset_activations() {
  scratch_.reset();
  for (auto& s : slots_) *s = Slot();
}

// ---- activations ------------------------------------------------------------------------

int64_t activation_bytes(const ModelConfig& c, DType activation_dtype, Checkpointing checkpointing, int64_t B,
                         int64_t T) {
  // Element counts as ensure_activations and allocate_slot allocate them (below).
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

int64_t ModelStage::allocated_activation_bytes() const {
  int64_t bytes = 0;
  auto add = [&](const OwnedTensor& t) {
    if (t->has_data()) bytes += static_cast<int64_t>(t->nbytes());
  };
  auto add_layers = [&](const std::vector<LayerActs>& layers) {
    for (const LayerActs& l : layers)
      for (const OwnedTensor* t :
           {&l.x_mid, &l.ln1_mean, &l.ln1_rstd, &l.qkv, &l.att, &l.lse, &l.ln2_mean, &l.ln2_rstd, &l.fc, &l.act})
        add(*t);
  };
  for (const auto& s : slots_) {
    for (const OwnedTensor& t : s->x) add(t);
    add_layers(s->layers);
    for (const OwnedTensor& t : s->saved_att) add(t);
    for (const OwnedTensor& t : s->saved_lse) add(t);
    for (const OwnedTensor* t : {&s->lnf, &s->lnf_mean, &s->lnf_rstd, &s->dx}) add(*t);
  }
  if (scratch_) {
    const Scratch& a = *scratch_;
    add_layers(a.recompute);
    for (const OwnedTensor* t :
         {&a.d_ln, &a.d_branch, &a.d_qkv, &a.d_att, &a.d_fc, &a.d_act, &a.proj, &a.ln, &a.rope.cos, &a.rope.sin})
      add(*t);
  }
  return bytes;
}

namespace {

struct Allocator {
  DType activation_dtype;
  Device device;
  // Activations in the model's activation dtype (bf16 on the GPU for speed); the saved
  // normalisation statistics and log-sum-exps stay f32.
  OwnedTensor act(Shape s) const { return OwnedTensor(std::move(s), activation_dtype, device); }
  OwnedTensor f32(Shape s) const { return OwnedTensor(std::move(s), DType::F32, device); }
};

LayerActs make_layer_acts(const ModelConfig& c, const Allocator& m, int64_t B, int64_t T, Checkpointing cp) {
  const int64_t N = B * T;
  LayerActs a;
  a.x_mid = m.act({N, c.hidden_size});
  a.ln1_mean = m.f32({N});
  a.ln1_rstd = m.f32({N});
  a.qkv = m.act({N, c.qkv_width()});
  if (cp == Checkpointing::None) {
    a.att = m.act({N, c.num_heads * c.head_dim});
    a.lse = m.f32({B, c.num_heads, T});
  }
  a.ln2_mean = m.f32({N});
  a.ln2_rstd = m.f32({N});
  a.fc = m.act({N, c.mlp_in_width()});
  a.act = m.act({N, c.intermediate_size});
  return a;
}

}  // namespace

void ModelStage::ensure_activations(Slot& s, int64_t B, int64_t T) {
  if (!scratch_ || scratch_->B != B || scratch_->T != T) {
    const ModelConfig& c = config_;
    if (T > c.max_position_embeddings)
      ZT_THROW_INPUT("sequence length ", T, " exceeds the model's max_position_embeddings (", c.max_position_embeddings,
                     "): use shorter sequences");
    for (const auto& other : slots_)
      ZT_CHECK(other.get() == &s || !other->in_flight, "model stage: a micro-batch of ", B, " x ", T,
               " while one of another shape is in flight");
    reset_activations();
    const Allocator m{options_.activation_dtype, options_.device};
    const int64_t N = B * T, C = c.hidden_size;
    auto a = std::make_unique<Scratch>();
    a->B = B;
    a->T = T;
    if (options_.checkpointing == Checkpointing::EveryBlock)
      a->recompute.push_back(make_layer_acts(c, m, B, T, Checkpointing::EveryBlock));
    a->d_ln = m.act({N, C});
    a->d_branch = m.act({N, C});
    a->proj = m.act({N, C});
    a->ln = m.act({N, C});
    a->d_qkv = m.act({N, c.qkv_width()});
    a->d_att = m.act({N, c.num_heads * c.head_dim});
    a->d_fc = m.act({N, c.mlp_in_width()});
    a->d_act = m.act({N, c.intermediate_size});
    if (c.position == PositionKind::Rotary) a->rope = ops::make_rope_table(c.rope, static_cast<int>(T), m.device);
    if (options_.lora.enabled()) {
      const LoraScratchSizes z = lora_scratch_sizes(c, options_.lora, N);
      auto flat = [&](int64_t n) { return m.act({std::max<int64_t>(n, 1)}); };
      a->lora_xd = flat(z.xd);
      a->lora_dxd = flat(z.xd);
      a->lora_h = flat(z.h);
      a->lora_dh = flat(z.h);
    }
    scratch_ = std::move(a);
  }
  if (!s.allocated) allocate_slot(s);
}

void ModelStage::allocate_slot(Slot& s) {
  const ModelConfig& c = config_;
  const Allocator m{options_.activation_dtype, options_.device};
  const int64_t B = scratch_->B, T = scratch_->T, N = B * T, C = c.hidden_size;
  const int layers = spec_.last_layer - spec_.first_layer;
  for (int i = 0; i <= layers; ++i) s.x.push_back(m.act({N, C}));
  if (options_.checkpointing == Checkpointing::EveryBlock) {
    for (int i = 0; i < layers; ++i) {
      s.saved_att.push_back(m.act({N, c.num_heads * c.head_dim}));
      s.saved_lse.push_back(m.f32({B, c.num_heads, T}));
    }
  } else {
    for (int i = 0; i < layers; ++i) s.layers.push_back(make_layer_acts(c, m, B, T, Checkpointing::None));
  }
  if (has_head()) {
    s.lnf = m.act({N, C});
    s.lnf_mean = m.f32({N});
    s.lnf_rstd = m.f32({N});
  }
  s.dx = m.act({N, C});
  s.allocated = true;
}

void ModelStage::set_packed_samples(Slot& s, const Tensor& host_segments) {
  s.segment_starts = Tensor();
  s.positions = Tensor();
  if (!host_segments.has_data()) return;
  const int64_t B = scratch_->B, T = scratch_->T;
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
  if (config_.position == PositionKind::Rotary) make_token_rope_table(s.token_rope, scratch_->rope, s.positions);
}

// ---- forward ----------------------------------------------------------------------------

ModelStage::Slot& ModelStage::start_forward(int index, const StageInput& in) {
  Slot& s = slot(index);
  int64_t B = 0, T = 0;
  if (has_embedding()) {
    ZT_CHECK(in.tokens.dim() == 2 && in.tokens.dtype() == DType::I32, "tokens must be i32 [B, T]");
    B = in.tokens.size(0);
    T = in.tokens.size(1);
  } else {
    ZT_CHECK(in.hidden.dim() == 3 && in.hidden.size(2) == config_.hidden_size &&
                 in.hidden.dtype() == options_.activation_dtype && in.hidden.device() == options_.device,
             "a later stage's input must be [B, T, ", config_.hidden_size, "] in ",
             dtype_name(options_.activation_dtype), " on the model's device, got ", shape_str(in.hidden.shape()));
    B = in.hidden.size(0);
    T = in.hidden.size(1);
  }
  s.in_flight = false;
  ensure_activations(s, B, T);
  set_packed_samples(s, in.segment_starts);
  if (has_embedding()) s.tokens = ids_on(options_.device, in.tokens, s.token_copy);
  s.mode = mode_;
  s.dropout_seed = dropout_seed_;
  s.dropout_step = dropout_step_;
  return s;
}

void ModelStage::forward(int index, const StageInput& in) {
  Slot& s = start_forward(index, in);
  if (has_embedding())
    embedding_forward(s);
  else
    ops::copy(s.x[0], in.hidden.reshape({s.x[0]->size(0), config_.hidden_size}));
  for (int l = spec_.first_layer; l < spec_.last_layer; ++l) layer_forward(s, l);
  if (has_head()) head_forward(s, in);
  s.in_flight = !has_head() || in.head == HeadWork::Deferred;
}

void ModelStage::embedding_forward(Slot& s) {
  const ModelConfig& c = config_;
  const int64_t B = scratch_->B, T = scratch_->T;
  UnitScope scope(hooks(), Pass::Forward, &embed_unit(registry_), {lora_copy_unit(kLoraTokenEmbeddingUnit)});
  if (embedding_open_through_head()) scope.leave_open();
  const Tensor x0 = s.x[0]->reshape({B, T, c.hidden_size});
  if (s.positions.has_data())
    embed_forward_at(c, input_embedding_weights(Storage::Values), x0, s.tokens, s.positions, scratch_->proj);
  else
    embed_forward(c, input_embedding_weights(Storage::Values), x0, s.tokens, 0);
  if (s.mode == Mode::Train && c.embd_pdrop > 0.0f) ops::dropout_forward(x0, x0, c.embd_pdrop, embed_dropout_rng(s));
}

void ModelStage::layer_forward(Slot& s, int l) {
  Unit& u = block_unit(registry_, l);
  Unit* adapters = lora_unit(l);
  UnitScope scope(hooks(), Pass::Forward, &u, {adapters});
  BlockCall call = block_call(s, l);
  const BlockLora lora = adapters ? block_lora_views(s, l) : BlockLora();
  if (adapters) call.lora = &lora;
  const UnitWeights base(u, Storage::Values);
  block_forward(config_, adapters ? with_trained(base, lora.trained_values) : base, call, layer_acts(s, l),
                scratch_->block(), x_at(s, l), x_at(s, l + 1));
}

void ModelStage::head_forward(Slot& s, const StageInput& in) {
  UnitHooks& h = hooks();
  // A tied head reads the embedding unit: kept open from the input on a stage holding both
  // (training leaves it open on into the backward), opened with the head on another.
  Unit* tied =
      head_reads_embedding() && !(has_embedding() && in.head == HeadWork::Deferred) ? &embed_unit(registry_) : nullptr;
  UnitScope tied_scope(h, Pass::Forward, tied, {}, has_embedding() ? Opened::Earlier : Opened::Here);
  UnitScope head_scope(h, Pass::Forward, &head_unit(registry_));
  {
    UnitScope norm_scope(h, Pass::Forward, lora_copy_unit(kLoraFinalNormUnit));
    final_norm_forward(config_, final_norm_weights(Storage::Values), s.lnf, s.lnf_mean, s.lnf_rstd,
                       x_at(s, spec_.last_layer));
  }
  if (in.head != HeadWork::Logits) s.targets = ids_on(options_.device, in.targets, s.target_copy);
  if (in.head == HeadWork::Deferred) return;
  UnitScope copy_scope(h, Pass::Forward, lora_copy_unit(kLoraLmHeadUnit));
  if (in.head == HeadWork::Loss) {
    s.loss = ops::lm_head_cross_entropy_forward(s.lnf, head_weight(), s.targets.reshape({s.targets.numel()}),
                                                config_.vocab_size, kIgnoreIndex, Tensor());
  } else {
    const int64_t N = scratch_->B * scratch_->T, V = config_.vocab_size;
    ZT_CHECK(in.logits.numel() == N * V && in.logits.dtype() == DType::F32, "logits must be f32 [B, T, V]");
    ops::linear_forward(in.logits.reshape({N, V}), s.lnf, head_weight().narrow(0, 0, V), Tensor());
  }
}

// ---- backward ---------------------------------------------------------------------------

ops::CrossEntropyResult ModelStage::backward_from_loss(int index, float grad_scale) {
  ZT_CHECK(has_head(), "model stage: backward_from_loss on a stage without the head");
  Slot& s = slot(index);
  ZT_CHECK(s.in_flight, "model stage: backward of slot ", index, " without its training forward");
  const ops::CrossEntropyResult r = head_backward(s, grad_scale);
  layers_backward(s);
  if (has_embedding()) embedding_backward(s);
  s.in_flight = false;
  return r;
}

void ModelStage::backward(int index, const Tensor& dout) {
  ZT_CHECK(!has_head(), "model stage: the last stage's backward starts from the loss (backward_from_loss)");
  Slot& s = slot(index);
  ZT_CHECK(s.in_flight, "model stage: backward of slot ", index, " without its forward");
  ZT_CHECK(dout.numel() == s.dx->numel(), "model stage: the output gradient has ", dout.numel(),
           " elements, the output ", s.dx->numel());
  ops::copy(s.dx, dout.reshape(s.dx->shape()));
  layers_backward(s);
  if (has_embedding()) embedding_backward(s);
  s.in_flight = false;
}

ops::CrossEntropyResult ModelStage::head_backward(Slot& s, float grad_scale) {
  UnitHooks& h = hooks();
  Unit& head = head_unit(registry_);
  Unit& embed = embed_unit(registry_);
  const bool tied = head_reads_embedding();
  // Head: loss and its gradient in one pass; d_ln receives d(final norm output).
  UnitScope head_scope(h, Pass::Backward, &head);
  UnitScope tied_scope(h, Pass::Backward, tied ? &embed : nullptr);  // the head's weight lives there
  if (has_embedding()) tied_scope.leave_open();                      // the input's backward closes it
  if (!head.frozen()) require_grads(head);
  if (tied && !embed.frozen()) require_grads(embed);
  ops::CrossEntropyResult r;
  {
    Unit* head_copy = lora_copy_unit(kLoraLmHeadUnit);
    UnitScope copy_scope(h, Pass::Backward, head_copy);
    if (head_copy) require_grads(*head_copy);
    const int64_t N = scratch_->B * scratch_->T;
    r = ops::lm_head_cross_entropy_forward_backward(scratch_->d_ln, head_weight_grad(), s.lnf, head_weight(),
                                                    s.targets.reshape({N}), config_.vocab_size, kIgnoreIndex,
                                                    grad_scale);
  }
  Unit* trained_norm = lora_copy_unit(kLoraFinalNormUnit);
  UnitScope norm_scope(h, Pass::Backward, trained_norm);
  if (trained_norm) require_grads(*trained_norm);
  final_norm_backward(config_, final_norm_weights(Storage::Values), final_norm_weights(Storage::Grads), s.dx,
                      scratch_->d_ln, x_at(s, spec_.last_layer), s.lnf_mean, s.lnf_rstd);
  return r;
}

void ModelStage::layers_backward(Slot& s) {
  for (int l = spec_.last_layer - 1; l >= spec_.first_layer; --l) layer_backward(s, l);
}

void ModelStage::layer_backward(Slot& s, int l) {
  Unit& u = block_unit(registry_, l);
  Unit* adapters = lora_unit(l);
  UnitScope scope(hooks(), Pass::Backward, &u, {adapters});
  if (!u.frozen()) require_grads(u);
  if (adapters) require_grads(*adapters);
  BlockCall call = block_call(s, l);
  const BlockLora lora = adapters ? block_lora_views(s, l) : BlockLora();
  const UnitWeights base(u, Storage::Values);
  const UnitWeights w = adapters ? with_trained(base, lora.trained_values) : base;
  if (adapters) call.lora = &lora;
  const BlockActivations a = layer_acts(s, l);
  const Tensor& x_in = x_at(s, l);
  if (options_.checkpointing == Checkpointing::EveryBlock) {
    call.pass = BlockPass::Recompute;
    block_forward(config_, w, call, a, scratch_->block(), x_in, x_at(s, l + 1));
  }
  const UnitWeights g(u, Storage::Grads);
  block_backward(config_, w, adapters ? with_trained(g, lora.trained_grads) : g, call, a, scratch_->block(),
                 scratch_->grads(), x_in, s.dx);
}

void ModelStage::embedding_backward(Slot& s) {
  const ModelConfig& c = config_;
  Unit& embed = embed_unit(registry_);
  // LoRA: the frozen embedding takes no gradient; a trained copy of it (modules_to_save)
  // takes the token rows' gradient.
  Unit* embedding_copy = lora_copy_unit(kLoraTokenEmbeddingUnit);
  UnitScope scope(hooks(), Pass::Backward, &embed, {embedding_copy},
                  embedding_open_through_head() ? Opened::Earlier : Opened::Here);
  Unit& trained = embedding_copy ? *embedding_copy : embed;
  if (trained.frozen()) return;  // nothing below the blocks is trained
  require_grads(trained);
  const Tensor dx3 = s.dx->reshape({scratch_->B, scratch_->T, c.hidden_size});
  if (s.mode == Mode::Train && c.embd_pdrop > 0.0f) ops::dropout_backward(dx3, dx3, c.embd_pdrop, embed_dropout_rng(s));
  const UnitWeights grads =
      embedding_copy ? lora_trained_weights(*embedding_copy, Storage::Grads) : UnitWeights(embed, Storage::Grads);
  embed_backward(c, grads, dx3, s.tokens, s.positions);
}

// ---- results ----------------------------------------------------------------------------

Tensor ModelStage::output(int index) const {
  ZT_CHECK(!has_head(), "model stage: the last stage hands on no hidden state");
  const Slot& s = slot(index);
  ZT_CHECK(s.allocated, "model stage: output of slot ", index, " before its forward");
  return s.x.back()->reshape({scratch_->B, scratch_->T, config_.hidden_size});
}

Tensor ModelStage::input_grad(int index) const {
  ZT_CHECK(!has_embedding(), "model stage: the first stage's input gradient goes into the embedding");
  const Slot& s = slot(index);
  ZT_CHECK(s.allocated, "model stage: input gradient of slot ", index, " before its backward");
  return s.dx->reshape({scratch_->B, scratch_->T, config_.hidden_size});
}

const ops::CrossEntropyResult& ModelStage::loss(int index) const { return slot(index).loss; }

// ---- views ------------------------------------------------------------------------------

const Tensor& ModelStage::x_at(const Slot& s, int layer) const {
  return s.x[static_cast<size_t>(layer - spec_.first_layer)];
}

BlockActivations ModelStage::layer_acts(const Slot& s, int layer) const {
  const size_t i = static_cast<size_t>(layer - spec_.first_layer);
  if (s.saved_att.empty()) return s.layers[i].views();
  BlockActivations a = scratch_->recompute[0].views();
  a.att = s.saved_att[i];
  a.lse = s.saved_lse[i];
  return a;
}

BlockCall ModelStage::block_call(const Slot& s, int layer) const {
  BlockCall call;
  call.layer = layer;
  call.batch = scratch_->B;
  call.tokens = scratch_->T;
  call.rope = &scratch_->rope;
  if (s.segment_starts.has_data()) {
    call.segment_starts = &s.segment_starts;
    call.rope = &s.token_rope;
  }
  if (s.mode == Mode::Train) call.dropout = {config_.resid_pdrop, s.dropout_seed, s.dropout_step};
  return call;
}

Tensor ModelStage::head_weight() {
  if (Unit* copy = lora_copy_unit(kLoraLmHeadUnit)) return lora_trained_weights(*copy, Storage::Values)[Field::LmHead];
  return head_matrix(config_, UnitWeights(embed_unit(registry_), Storage::Values),
                     UnitWeights(head_unit(registry_), Storage::Values));
}

Tensor ModelStage::head_weight_grad() {
  if (Unit* copy = lora_copy_unit(kLoraLmHeadUnit)) return lora_trained_weights(*copy, Storage::Grads)[Field::LmHead];
  return head_matrix(config_, UnitWeights(embed_unit(registry_), Storage::Grads),
                     UnitWeights(head_unit(registry_), Storage::Grads));
}

Unit* ModelStage::lora_unit(int layer) {
  if (!options_.lora.enabled()) return nullptr;
  return &registry_.unit(static_cast<size_t>(config_.num_layers) + 2 + static_cast<size_t>(layer));
}

Unit* ModelStage::lora_copy_unit(const char* name) {
  if (!options_.lora.enabled()) return nullptr;
  // After the adapter units: at most three, so a scan.
  for (size_t i = 2 * static_cast<size_t>(config_.num_layers) + 2; i < registry_.size(); ++i)
    if (registry_.unit(i).name() == name) return &registry_.unit(i);
  return nullptr;
}

bool ModelStage::head_reads_embedding() {
  return config_.tie_word_embeddings && lora_copy_unit(kLoraLmHeadUnit) == nullptr;
}

bool ModelStage::embedding_open_through_head() { return has_embedding() && has_head() && head_reads_embedding(); }

UnitWeights ModelStage::final_norm_weights(Storage storage) {
  const UnitWeights base(head_unit(registry_), storage);
  Unit* trained_norm = lora_copy_unit(kLoraFinalNormUnit);
  return trained_norm ? with_trained(base, lora_trained_weights(*trained_norm, storage)) : base;
}

UnitWeights ModelStage::input_embedding_weights(Storage storage) {
  const UnitWeights base(embed_unit(registry_), storage);
  Unit* copy = lora_copy_unit(kLoraTokenEmbeddingUnit);
  return copy ? with_trained(base, lora_trained_weights(*copy, storage)) : base;
}

BlockLora ModelStage::block_lora_views(const Slot& s, int layer) {
  BlockLora b = block_lora(options_.lora, config_, *lora_unit(layer), layer);
  const Scratch& a = *scratch_;
  b.scratch = {a.lora_xd, a.lora_dxd, a.lora_h, a.lora_dh};
  b.seed = s.dropout_seed;
  b.step = s.dropout_step;
  b.train = s.mode == Mode::Train;
  return b;
}

Philox ModelStage::embed_dropout_rng(const Slot& s) const { return dropout_rng(s.dropout_seed, s.dropout_step, -1, 0); }

}  // namespace zt::model
