#include "model/transformer.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "ops/activation.h"
#include "ops/copy.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace zt::model {
namespace {

ParamSpec weight(std::string name, Shape shape, float std) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.init = Init::Normal;
  s.init_std = std;
  return s;
}
ParamSpec bias(std::string name, int64_t n) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = {n};
  s.init = Init::Zeros;
  s.decay = WeightDecay::Skip;
  return s;
}
ParamSpec gain(std::string name, int64_t n) {
  ParamSpec s = bias(std::move(name), n);
  s.init = Init::Ones;
  return s;
}
// GPT-2's Conv1D weight: stored [in, out] as in HF files.
ParamSpec conv1d(std::string name, int64_t in, int64_t out, float std) {
  ParamSpec s = weight(std::move(name), {in, out}, std);
  s.layout = WeightLayout::InOut;
  return s;
}
ParamSpec packed(ParamSpec s) {
  s.placement = ParamSpec::Placement::Packed;
  return s;
}
ParamSpec vocab_matrix(std::string name, const ModelConfig& c) {
  ParamSpec s = weight(std::move(name), {c.padded_vocab_size(), c.hidden_size}, c.initializer_range);
  s.hf_shape = {c.vocab_size, c.hidden_size};
  return s;
}

// A contiguous view spanning `count` consecutive packed parameters starting at `first`.
Tensor span_view(const std::vector<ParamEntry>& params, size_t first, size_t count, bool grad, Shape shape) {
  const ParamEntry& a = params[first];
  int64_t n = 0;
  for (size_t i = first; i < first + count; ++i) {
    ZT_CHECK(i == first || params[i].offset == params[i - 1].offset + params[i - 1].numel(),
             "parameters ", a.name(), ".. are not packed");
    n += params[i].numel();
  }
  const Tensor& base = grad ? a.grad : a.value;
  if (base.data() == nullptr) return Tensor();
  ZT_CHECK(shape_numel(shape) == n, "span shape mismatch at ", a.name());
  return Tensor(base.data(), std::move(shape), base.dtype(), base.device(), a.name());
}

}  // namespace

int64_t count_targets(const Tensor& targets, int ignore_index) {
  const int32_t* t = targets.data_as<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += t[i] != ignore_index;
  return n;
}

// Views of one block's parameters (and gradients) in the shapes the ops take.
struct Transformer::BlockParams {
  Tensor norm1_w, norm1_b, qkv_w, qkv_b, out_w, out_b, norm2_w, norm2_b;
  // GPT-2: fc = c_fc [C, F] (in, out), down = c_proj. Llama: fc = gate and up packed into one
  // [2F, C] matrix (gate rows first), so that both projections are one GEMM each way.
  Tensor fc_w, fc_b, down_w, down_b;
  Tensor d_norm1_w, d_norm1_b, d_qkv_w, d_qkv_b, d_out_w, d_out_b, d_norm2_w, d_norm2_b;
  Tensor d_fc_w, d_fc_b, d_down_w, d_down_b;
  WeightLayout layout = WeightLayout::OutIn;  // of every matmul weight in the block
};

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
  OwnedTensor fc;   // GPT-2: pre-GELU [N, F]; Llama: [gate | up] [N, 2F]
  OwnedTensor act;  // [N, F]
};

struct Transformer::Activations {
  int64_t B = 0, T = 0;
  std::vector<OwnedTensor> x;         // residual stream at each block input, and the trunk output
  std::vector<LayerActs> layers;      // one per layer, or one shared when checkpointing
  OwnedTensor lnf, lnf_mean, lnf_rstd;
  // Backward scratch.
  OwnedTensor dx, d_ln, d_branch, d_qkv, d_att, d_fc, d_act, proj;
  OwnedTensor ln;  // [N, C] the normalised input of the branch being computed (see LayerActs)
  ops::RopeTable rope;
  // A model on the GPU reads host token ids from device copies.
  OwnedTensor tokens, targets;
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

Transformer::Transformer(ModelConfig config, ModelOptions options)
    : config_(std::move(config)), options_(options) {
  config_.validate("model config");
  if (options_.activation_dtype != DType::F32 && !options_.device.is_cuda())
    ZT_THROW_UNSUPPORTED("activations in ", dtype_name(options_.activation_dtype),
                         " need the GPU backend; on the CPU they are f32");
  const ModelConfig& c = config_;
  const int64_t C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads;
  const float std = c.initializer_range;
  const int shards = options_.shard_count;
  const bool gpt2 = c.family == Family::GPT2;
  const std::string root = gpt2 ? "transformer." : "model.";

  // Unit "embed".
  std::vector<ParamSpec> embed;
  embed.push_back(vocab_matrix(root + (gpt2 ? "wte.weight" : "embed_tokens.weight"), c));
  if (gpt2) embed.push_back(weight(root + "wpe.weight", {c.max_position_embeddings, C}, std));
  registry_.add_unit("embed", std::move(embed), shards);

  // Units "block.i".
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::vector<ParamSpec> p;
    if (gpt2) {
      const std::string b = root + "h." + std::to_string(i) + ".";
      // GPT-2 scales the residual projections by 1/sqrt(2 L) at init (HF _init_weights).
      const float proj_std = std / std::sqrt(2.0f * static_cast<float>(c.num_layers));
      p.push_back(gain(b + "ln_1.weight", C));
      p.push_back(bias(b + "ln_1.bias", C));
      p.push_back(conv1d(b + "attn.c_attn.weight", C, 3 * C, std));
      p.push_back(bias(b + "attn.c_attn.bias", 3 * C));
      p.push_back(conv1d(b + "attn.c_proj.weight", C, C, proj_std));
      p.push_back(bias(b + "attn.c_proj.bias", C));
      p.push_back(gain(b + "ln_2.weight", C));
      p.push_back(bias(b + "ln_2.bias", C));
      p.push_back(conv1d(b + "mlp.c_fc.weight", C, F, std));
      p.push_back(bias(b + "mlp.c_fc.bias", F));
      p.push_back(conv1d(b + "mlp.c_proj.weight", F, C, proj_std));
      p.push_back(bias(b + "mlp.c_proj.bias", C));
    } else {
      const std::string b = root + "layers." + std::to_string(i) + ".";
      p.push_back(gain(b + "input_layernorm.weight", C));
      p.push_back(weight(b + "self_attn.q_proj.weight", {Hq * D, C}, std));
      p.push_back(packed(weight(b + "self_attn.k_proj.weight", {Hkv * D, C}, std)));
      p.push_back(packed(weight(b + "self_attn.v_proj.weight", {Hkv * D, C}, std)));
      if (c.qkv_bias) {
        p.push_back(bias(b + "self_attn.q_proj.bias", Hq * D));
        p.push_back(packed(bias(b + "self_attn.k_proj.bias", Hkv * D)));
        p.push_back(packed(bias(b + "self_attn.v_proj.bias", Hkv * D)));
      }
      p.push_back(weight(b + "self_attn.o_proj.weight", {C, Hq * D}, std));
      if (c.attn_out_bias) p.push_back(bias(b + "self_attn.o_proj.bias", C));
      p.push_back(gain(b + "post_attention_layernorm.weight", C));
      p.push_back(weight(b + "mlp.gate_proj.weight", {F, C}, std));
      p.push_back(packed(weight(b + "mlp.up_proj.weight", {F, C}, std)));  // [gate; up] is one matrix
      p.push_back(weight(b + "mlp.down_proj.weight", {C, F}, std));
      if (c.mlp_bias) {
        p.push_back(bias(b + "mlp.gate_proj.bias", F));
        p.push_back(packed(bias(b + "mlp.up_proj.bias", F)));
        p.push_back(bias(b + "mlp.down_proj.bias", C));
      }
    }
    registry_.add_unit("block." + std::to_string(i), std::move(p), shards);
  }

  // Unit "head".
  std::vector<ParamSpec> head;
  if (gpt2) {
    head.push_back(gain(root + "ln_f.weight", C));
    head.push_back(bias(root + "ln_f.bias", C));
  } else {
    head.push_back(gain(root + "norm.weight", C));
  }
  if (!c.tie_word_embeddings) head.push_back(vocab_matrix("lm_head.weight", c));
  registry_.add_unit("head", std::move(head), shards);

  for (auto& u : registry_.units()) {
    u->set_storage(options_.param_dtype, options_.grad_dtype, options_.device);
    if (options_.allocate_params) u->allocate_params(options_.param_dtype, options_.device);
    if (options_.allocate_grads) u->allocate_grads(options_.grad_dtype, options_.device);
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
    // Drawn on the host (the same values on every device), then copied to a GPU model.
    const bool on_host = p.value.device().is_cpu();
    OwnedTensor staged = on_host ? OwnedTensor() : OwnedTensor(p.spec.shape, p.value.dtype());
    const Tensor value = on_host ? p.value : staged.view();
    const Tensor rows = value.narrow(0, 0, p.spec.hf_shape[0]);
    switch (p.spec.init) {
      case Init::Zeros: value.zero(); break;
      case Init::Ones: value.fill_f32(1.0f); break;
      case Init::Normal:
        value.zero();  // vocab padding rows stay zero
        fill_normal(rows, Philox(seed, hash_name(p.name().c_str())), 0.0f, p.spec.init_std);
        break;
    }
    if (!on_host) ops::copy(p.value, value);
  }
}

void Transformer::zero_grads() {
  for (auto& u : registry_.units())
    if (u->has_grads()) u->flat_grads().zero();
}

Transformer::BlockParams Transformer::block_params(int layer) {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  auto& ps = registry_.unit(static_cast<size_t>(layer) + 1).params();
  BlockParams b;
  auto both = [&](size_t i, Tensor& v, Tensor& g) {
    v = ps[i].value;
    g = ps[i].grad;
  };
  if (c.family == Family::GPT2) {
    both(0, b.norm1_w, b.d_norm1_w);
    both(1, b.norm1_b, b.d_norm1_b);
    both(2, b.qkv_w, b.d_qkv_w);
    both(3, b.qkv_b, b.d_qkv_b);
    both(4, b.out_w, b.d_out_w);
    both(5, b.out_b, b.d_out_b);
    both(6, b.norm2_w, b.d_norm2_w);
    both(7, b.norm2_b, b.d_norm2_b);
    both(8, b.fc_w, b.d_fc_w);
    both(9, b.fc_b, b.d_fc_b);
    both(10, b.down_w, b.d_down_w);
    both(11, b.down_b, b.d_down_b);
    b.layout = WeightLayout::InOut;
    return b;
  }
  size_t i = 0;
  both(i++, b.norm1_w, b.d_norm1_w);
  b.qkv_w = span_view(ps, i, 3, false, {c.qkv_width(), C});
  b.d_qkv_w = span_view(ps, i, 3, true, {c.qkv_width(), C});
  i += 3;
  if (c.qkv_bias) {
    b.qkv_b = span_view(ps, i, 3, false, {c.qkv_width()});
    b.d_qkv_b = span_view(ps, i, 3, true, {c.qkv_width()});
    i += 3;
  }
  both(i++, b.out_w, b.d_out_w);
  if (c.attn_out_bias) both(i++, b.out_b, b.d_out_b);
  both(i++, b.norm2_w, b.d_norm2_w);
  const size_t gate_up = i;
  b.fc_w = span_view(ps, gate_up, 2, false, {2 * F, C});
  b.d_fc_w = span_view(ps, gate_up, 2, true, {2 * F, C});
  i += 2;
  both(i++, b.down_w, b.d_down_w);
  if (c.mlp_bias) {
    b.fc_b = span_view(ps, i, 2, false, {2 * F});
    b.d_fc_b = span_view(ps, i, 2, true, {2 * F});
    i += 2;
    both(i++, b.down_b, b.d_down_b);
  }
  ZT_CHECK(i == ps.size(), "block parameter layout mismatch");
  return b;
}

// Gradient buffers exist from construction, or (ZeRO 2-3) from the unit's before_backward hook.
static void require_grads(const Unit& u) {
  ZT_CHECK(u.has_grads(), "backward of unit ", u.name(), " without a gradient buffer");
}

Tensor Transformer::head_weight() {
  if (config_.tie_word_embeddings) return registry_.unit(0).params()[0].value;
  return registry_.units().back()->params().back().value;
}

Tensor Transformer::head_weight_grad() {
  if (config_.tie_word_embeddings) return registry_.unit(0).params()[0].grad;
  return registry_.units().back()->params().back().grad;
}

Philox Transformer::dropout_rng(int layer, int site) const {
  const uint64_t stream = (dropout_step_ << 24) ^ (static_cast<uint64_t>(layer + 1) << 4) ^ static_cast<uint64_t>(site);
  return Philox(dropout_seed_ ^ 0x5EEDD50Full, stream);
}

void Transformer::ensure_activations(int64_t B, int64_t T) {
  if (acts_ && acts_->B == B && acts_->T == T) return;
  const ModelConfig& c = config_;
  if (T > c.max_position_embeddings)
    ZT_THROW_INPUT("sequence length ", T, " exceeds the model's max_position_embeddings (",
                   c.max_position_embeddings, "): use shorter sequences");
  const Device dev = options_.device;
  const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t HD = c.num_heads * c.head_dim;
  const bool llama = c.family == Family::Llama;
  auto act = std::make_unique<Activations>();
  act->B = B;
  act->T = T;
  // Activations in the model's activation dtype (bf16 on the GPU for speed); the saved
  // normalisation statistics and log-sum-exps stay f32.
  auto act_t = [&](Shape s) { return OwnedTensor(std::move(s), options_.activation_dtype, dev); };
  auto f32 = [&](Shape s) { return OwnedTensor(std::move(s), DType::F32, dev); };
  for (int64_t i = 0; i <= c.num_layers; ++i) act->x.push_back(act_t({N, C}));
  const int64_t n_layer_acts = options_.checkpointing == Checkpointing::EveryBlock ? 1 : c.num_layers;
  for (int64_t i = 0; i < n_layer_acts; ++i) {
    LayerActs a;
    a.x_mid = act_t({N, C});
    a.ln1_mean = f32({N});
    a.ln1_rstd = f32({N});
    a.qkv = act_t({N, c.qkv_width()});
    a.att = act_t({N, HD});
    a.lse = f32({B, c.num_heads, T});
    a.ln2_mean = f32({N});
    a.ln2_rstd = f32({N});
    a.fc = act_t({N, llama ? 2 * F : F});
    a.act = act_t({N, F});
    act->layers.push_back(std::move(a));
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
  act->d_fc = act_t({N, llama ? 2 * F : F});
  act->d_act = act_t({N, F});
  if (llama) act->rope = ops::make_rope_table(c.rope, static_cast<int>(T), dev);
  acts_ = std::move(act);
}

// out = norm(x) (LayerNorm for GPT-2, RMSNorm for Llama), saving the statistics the
// backward reads; called again by the backward to recompute the same out (same bits).
static void branch_norm(Family family, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& w, const Tensor& b, float eps) {
  if (family == Family::GPT2) {
    ops::layernorm_forward(out, mean, rstd, x, w, b, eps);
  } else {
    ops::rmsnorm_forward(out, rstd, x, w, eps);
  }
}

void Transformer::block_forward(int layer, const Tensor& x_in, const Tensor& x_out, bool keep) {
  (void)keep;
  const ModelConfig& c = config_;
  const bool gpt2 = c.family == Family::GPT2;
  const int64_t B = acts_->B, T = acts_->T, N = B * T;
  const BlockParams p = block_params(layer);
  LayerActs& a = acts_->layers[acts_->layers.size() == 1 ? 0 : static_cast<size_t>(layer)];
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const bool dropout = mode_ == Mode::Train && c.resid_pdrop > 0.0f;
  const int Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads);

  const Tensor ln = acts_->ln;

  // Attention branch.
  branch_norm(c.family, ln, a.ln1_mean, a.ln1_rstd, x_in, p.norm1_w, p.norm1_b, c.norm_eps);
  ops::linear_forward(a.qkv, ln, p.qkv_w, p.qkv_b, p.layout);
  const Tensor qkv3 = a.qkv->reshape({B, T, c.qkv_width()});
  if (!gpt2) ops::rope_forward_inplace(qkv3, Hq, Hkv, acts_->rope);
  ops::attention_forward(a.att->reshape({B, T, Hq * c.head_dim}), a.lse, qkv3, Hq, Hkv, scale);
  const Tensor proj = acts_->proj;
  ops::linear_forward(proj, a.att, p.out_w, p.out_b, p.layout);
  if (dropout) ops::dropout_forward(proj, proj, c.resid_pdrop, dropout_rng(layer, 0));
  // The residual add, fused with the MLP branch's norm: x_mid = x_in + proj, ln = norm(x_mid).
  if (gpt2) {
    ops::add_layernorm_forward(a.x_mid, ln, a.ln2_mean, a.ln2_rstd, x_in, proj, p.norm2_w, p.norm2_b, c.norm_eps);
  } else {
    ops::add_rmsnorm_forward(a.x_mid, ln, a.ln2_rstd, x_in, proj, p.norm2_w, c.norm_eps);
  }

  // MLP branch.
  ops::linear_forward(a.fc, ln, p.fc_w, p.fc_b, p.layout);  // Llama: [gate | up] in one GEMM
  if (gpt2) {
    ops::gelu_forward(a.act, a.fc);
  } else {
    const int64_t F = c.intermediate_size;
    ops::swiglu_forward(a.act, a.fc->narrow(1, 0, F), a.fc->narrow(1, F, F));
  }
  ops::linear_forward(proj, a.act, p.down_w, p.down_b, p.layout);
  if (dropout) ops::dropout_forward(proj, proj, c.resid_pdrop, dropout_rng(layer, 1));
  ops::add(x_out, a.x_mid, proj);
  (void)N;
}

void Transformer::block_backward(int layer, const Tensor& dx) {
  const ModelConfig& c = config_;
  const bool gpt2 = c.family == Family::GPT2;
  const int64_t B = acts_->B, T = acts_->T;
  const BlockParams p = block_params(layer);
  LayerActs& a = acts_->layers[acts_->layers.size() == 1 ? 0 : static_cast<size_t>(layer)];
  Activations& s = *acts_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const bool dropout = mode_ == Mode::Train && c.resid_pdrop > 0.0f;
  const int Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads);
  const Tensor& x_in = s.x[static_cast<size_t>(layer)];

  // MLP branch: dx is the gradient of the block output.
  Tensor d_branch = dx;
  if (dropout) {
    ops::dropout_backward(s.d_branch, dx, c.resid_pdrop, dropout_rng(layer, 1));
    d_branch = s.d_branch;
  }
  ops::linear_backward(s.d_act, p.d_down_w, p.d_down_b, d_branch, a.act, p.down_w, p.layout);
  branch_norm(c.family, s.ln, a.ln2_mean, a.ln2_rstd, a.x_mid, p.norm2_w, p.norm2_b, c.norm_eps);
  if (gpt2) {
    ops::gelu_backward(s.d_fc, s.d_act, a.fc);
    ops::linear_backward(s.d_ln, p.d_fc_w, p.d_fc_b, s.d_fc, s.ln, p.fc_w, p.layout);
    ops::layernorm_backward(dx, p.d_norm2_w, p.d_norm2_b, s.d_ln, a.x_mid, p.norm2_w, a.ln2_mean, a.ln2_rstd,
                            GradWrite::Accumulate);
  } else {
    const int64_t F = c.intermediate_size;
    ops::swiglu_backward(s.d_fc->narrow(1, 0, F), s.d_fc->narrow(1, F, F), s.d_act, a.fc->narrow(1, 0, F),
                         a.fc->narrow(1, F, F));
    // One GEMM each for d[gate; up] and for d_ln = d_gate W_gate + d_up W_up (K = 2F).
    ops::linear_backward(s.d_ln, p.d_fc_w, p.d_fc_b, s.d_fc, s.ln, p.fc_w, p.layout);
    ops::rmsnorm_backward(dx, p.d_norm2_w, s.d_ln, a.x_mid, p.norm2_w, a.ln2_rstd, GradWrite::Accumulate);
  }
  // dx is now the gradient at x_mid: the norm's backward added the branch's share.

  // Attention branch.
  d_branch = dx;
  if (dropout) {
    ops::dropout_backward(s.d_branch, dx, c.resid_pdrop, dropout_rng(layer, 0));
    d_branch = s.d_branch;
  }
  ops::linear_backward(s.d_att, p.d_out_w, p.d_out_b, d_branch, a.att, p.out_w, p.layout);
  const Tensor qkv3 = a.qkv->reshape({B, T, c.qkv_width()});
  const Tensor dqkv3 = s.d_qkv->reshape({B, T, c.qkv_width()});
  ops::attention_backward(dqkv3, s.d_att->reshape({B, T, Hq * c.head_dim}), qkv3,
                          a.att->reshape({B, T, Hq * c.head_dim}), a.lse, Hq, Hkv, scale);
  if (!gpt2) ops::rope_backward_inplace(dqkv3, Hq, Hkv, s.rope);
  branch_norm(c.family, s.ln, a.ln1_mean, a.ln1_rstd, x_in, p.norm1_w, p.norm1_b, c.norm_eps);
  ops::linear_backward(s.d_ln, p.d_qkv_w, p.d_qkv_b, s.d_qkv, s.ln, p.qkv_w, p.layout);
  if (gpt2) {
    ops::layernorm_backward(dx, p.d_norm1_w, p.d_norm1_b, s.d_ln, x_in, p.norm1_w, a.ln1_mean, a.ln1_rstd,
                            GradWrite::Accumulate);
  } else {
    ops::rmsnorm_backward(dx, p.d_norm1_w, s.d_ln, x_in, p.norm1_w, a.ln1_rstd, GradWrite::Accumulate);
  }
  // dx is now the gradient of the block input.
}

void Transformer::forward_trunk(const Tensor& host_tokens, bool keep) {
  ZT_CHECK(host_tokens.dim() == 2 && host_tokens.dtype() == DType::I32, "tokens must be i32 [B, T]");
  const ModelConfig& c = config_;
  const int64_t B = host_tokens.size(0), T = host_tokens.size(1);
  ensure_activations(B, T);
  const Tensor tokens = ids_on(options_.device, host_tokens, acts_->tokens);
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  Activations& s = *acts_;

  Unit& embed = registry_.unit(0);
  hooks.before_forward(embed);
  const auto& ep = embed.params();
  const Tensor x0 = s.x[0]->reshape({B, T, c.hidden_size});
  ops::embedding_forward(x0, tokens, ep[0].value, c.family == Family::GPT2 ? ep[1].value : Tensor());
  if (mode_ == Mode::Train && c.embd_pdrop > 0.0f) ops::dropout_forward(x0, x0, c.embd_pdrop, dropout_rng(-1, 0));
  if (!c.tie_word_embeddings) hooks.after_forward(embed);

  for (int l = 0; l < c.num_layers; ++l) {
    Unit& u = registry_.unit(static_cast<size_t>(l) + 1);
    hooks.before_forward(u);
    block_forward(l, s.x[static_cast<size_t>(l)], s.x[static_cast<size_t>(l) + 1], keep);
    hooks.after_forward(u);
  }

  Unit& head = registry_.units().back().operator*();
  hooks.before_forward(head);
  const auto& hp = head.params();
  const Tensor& x_last = s.x.back();
  if (c.family == Family::GPT2) {
    ops::layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, x_last, hp[0].value, hp[1].value, c.norm_eps);
  } else {
    ops::rmsnorm_forward(s.lnf, s.lnf_rstd, x_last, hp[0].value, c.norm_eps);
  }
}

ops::CrossEntropyResult Transformer::forward(const Tensor& tokens, const Tensor& host_targets) {
  forward_trunk(tokens, false);
  const Tensor targets = ids_on(options_.device, host_targets, acts_->targets);
  ops::CrossEntropyResult r = ops::lm_head_cross_entropy_forward(
      acts_->lnf, head_weight(), targets.reshape({targets.numel()}), config_.vocab_size, kIgnoreIndex, Tensor());
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  hooks.after_forward(*registry_.units().back());
  if (config_.tie_word_embeddings) hooks.after_forward(registry_.unit(0));
  return r;
}

void Transformer::forward_logits(const Tensor& tokens, const Tensor& logits) {
  const int64_t N = tokens.numel(), V = config_.vocab_size;
  ZT_CHECK(logits.numel() == N * V && logits.dtype() == DType::F32, "logits must be f32 [B, T, V]");
  forward_trunk(tokens, false);
  ops::linear_forward(logits.reshape({N, V}), acts_->lnf, head_weight().narrow(0, 0, V), Tensor());
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  hooks.after_forward(*registry_.units().back());
  if (config_.tie_word_embeddings) hooks.after_forward(registry_.unit(0));
}

ops::CrossEntropyResult Transformer::forward_backward(const Tensor& host_tokens, const Tensor& host_targets,
                                                      float grad_scale) {
  const ModelConfig& c = config_;
  const bool recompute = options_.checkpointing == Checkpointing::EveryBlock;
  forward_trunk(host_tokens, true);
  Activations& s = *acts_;
  // forward_trunk already brought the token ids to the model's device.
  const Tensor tokens = host_tokens.device() == options_.device ? host_tokens : s.tokens.view();
  const Tensor targets = ids_on(options_.device, host_targets, s.targets);
  UnitHooks& hooks = hooks_ ? *hooks_ : no_hooks_;
  const int64_t B = s.B, T = s.T, N = B * T;

  // Head: loss and its gradient in one pass; s.d_ln receives d(final norm output).
  Unit& head = *registry_.units().back();
  const auto& hp = head.params();
  hooks.after_forward(head);
  hooks.before_backward(head);
  if (c.tie_word_embeddings) hooks.before_backward(registry_.unit(0));  // the head's weight lives there
  require_grads(head);
  if (c.tie_word_embeddings) require_grads(registry_.unit(0));
  const ops::CrossEntropyResult r = ops::lm_head_cross_entropy_forward_backward(
      s.d_ln, head_weight_grad(), s.lnf, head_weight(), targets.reshape({N}), c.vocab_size, kIgnoreIndex,
      grad_scale);
  if (c.family == Family::GPT2) {
    ops::layernorm_backward(s.dx, hp[0].grad, hp[1].grad, s.d_ln, s.x.back(), hp[0].value, s.lnf_mean,
                            s.lnf_rstd);
  } else {
    ops::rmsnorm_backward(s.dx, hp[0].grad, s.d_ln, s.x.back(), hp[0].value, s.lnf_rstd);
  }
  hooks.after_backward(head);

  for (int l = static_cast<int>(c.num_layers) - 1; l >= 0; --l) {
    Unit& u = registry_.unit(static_cast<size_t>(l) + 1);
    hooks.before_backward(u);
    require_grads(u);
    if (recompute) block_forward(l, s.x[static_cast<size_t>(l)], s.x[static_cast<size_t>(l) + 1], true);
    block_backward(l, s.dx);
    hooks.after_backward(u);
  }

  Unit& embed = registry_.unit(0);
  if (!c.tie_word_embeddings) hooks.before_backward(embed);
  require_grads(embed);
  const auto& ep = embed.params();
  const Tensor dx3 = s.dx->reshape({B, T, c.hidden_size});
  if (mode_ == Mode::Train && c.embd_pdrop > 0.0f) ops::dropout_backward(dx3, dx3, c.embd_pdrop, dropout_rng(-1, 0));
  ops::embedding_backward(ep[0].grad, c.family == Family::GPT2 ? ep[1].grad : Tensor(), dx3, tokens);
  hooks.after_backward(embed);
  return r;
}

}  // namespace zt::model
