// KV-cache inference engine: the training Transformer's block, run on Tn new tokens at a
// position offset, with keys/values appended to a per-layer cache.
#include "model/inference.h"

#include <cmath>
#include <map>
#include <string>

#include "core/error.h"
#include "model/transformer.h"
#include "ops/activation.h"
#include "ops/decode_attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/rope_offset.h"

namespace zt::model {

// One block's parameters in the shapes the ops take (views into the registry).
struct InferenceEngine::Layer {
  Tensor norm1_w, norm1_b, qkv_w, qkv_b, out_w, out_b, norm2_w, norm2_b;
  Tensor fc_w, fc_b, up_w, up_b, down_w, down_b;  // GPT-2: fc = c_fc, down = c_proj; Llama: fc = gate
  WeightLayout layout = WeightLayout::OutIn;       // GPT-2's Conv1D weights are [in, out]
};

// Activations for up to `rows` = B * Tn tokens; decode steps reuse a prefill's buffers.
struct InferenceEngine::Scratch {
  int64_t rows = 0;
  OwnedTensor x, ln, mean, rstd, qkv, att, proj, fc, up, act;
  ops::RopeTable rope;
};

namespace {

using ParamMap = std::map<std::string, const ParamEntry*>;

const Tensor& param(const ParamMap& m, const std::string& name) {
  const auto it = m.find(name);
  ZT_CHECK(it != m.end(), "inference: the registry has no parameter ", name);
  return it->second->value;
}
Tensor optional(const ParamMap& m, const std::string& name) {
  const auto it = m.find(name);
  return it == m.end() ? Tensor() : it->second->value;
}

// The parameters first..last are packed back to back in one unit (the registry places
// Llama's q/k/v that way); one view over all of them makes one GEMM.
Tensor packed_span(const ParamMap& m, const std::vector<std::string>& names, Shape shape) {
  const Tensor& first = param(m, names[0]);
  const char* base = static_cast<const char*>(first.data());
  int64_t n = 0;
  for (const auto& name : names) {
    const Tensor& t = param(m, name);
    ZT_CHECK(static_cast<const char*>(t.data()) == base + n * static_cast<int64_t>(dtype_size(first.dtype())) &&
                 t.dtype() == first.dtype(),
             "inference: ", name, " is not packed after ", names[0]);
    n += t.numel();
  }
  ZT_CHECK(shape_numel(shape) == n, "inference: packed span shape mismatch at ", names[0]);
  return Tensor(first.data(), std::move(shape), first.dtype(), first.device(), names[0]);
}

}  // namespace

InferenceEngine::InferenceEngine(const Transformer& model, InferenceOptions options)
    : InferenceEngine(model.config(), model.registry(), options) {}

InferenceEngine::InferenceEngine(const ModelConfig& config, const ParameterRegistry& registry,
                                 InferenceOptions options)
    : config_(config), registry_(registry), options_(options) {
  config_.validate("model config");
  const ModelConfig& c = config_;
  if (options_.max_seq_len <= 0) options_.max_seq_len = c.max_position_embeddings;
  if (options_.max_seq_len > c.max_position_embeddings)
    ZT_THROW_INPUT("inference cache of ", options_.max_seq_len, " tokens exceeds the model's max_position_embeddings (",
                   c.max_position_embeddings, "): use a shorter maximum sequence length");
  ZT_CHECK(options_.batch_size >= 1, "inference: batch_size must be positive");

  ParamMap m;
  registry_.for_each([&](const Unit& u, const ParamEntry& p) {
    ZT_CHECK(u.has_params(), "inference: unit ", u.name(), " has no parameters (gathered?)");
    ZT_CHECK(p.value.device().is_cpu(), "inference runs on the CPU; ", p.name(), " is on ", p.value.device().name());
    m[p.name()] = &p;
  });
  const int64_t C = c.hidden_size;
  const bool gpt2 = c.family == Family::GPT2;
  if (gpt2) {
    wte_ = param(m, "transformer.wte.weight");
    wpe_ = param(m, "transformer.wpe.weight");
    final_norm_w_ = param(m, "transformer.ln_f.weight");
    final_norm_b_ = param(m, "transformer.ln_f.bias");
  } else {
    wte_ = param(m, "model.embed_tokens.weight");
    final_norm_w_ = param(m, "model.norm.weight");
  }
  head_ = (c.tie_word_embeddings ? wte_ : param(m, "lm_head.weight")).narrow(0, 0, c.vocab_size);

  for (int64_t i = 0; i < c.num_layers; ++i) {
    Layer l;
    if (gpt2) {
      const std::string b = "transformer.h." + std::to_string(i) + ".";
      l.norm1_w = param(m, b + "ln_1.weight");
      l.norm1_b = param(m, b + "ln_1.bias");
      l.qkv_w = param(m, b + "attn.c_attn.weight");
      l.qkv_b = param(m, b + "attn.c_attn.bias");
      l.out_w = param(m, b + "attn.c_proj.weight");
      l.out_b = param(m, b + "attn.c_proj.bias");
      l.norm2_w = param(m, b + "ln_2.weight");
      l.norm2_b = param(m, b + "ln_2.bias");
      l.fc_w = param(m, b + "mlp.c_fc.weight");
      l.fc_b = param(m, b + "mlp.c_fc.bias");
      l.down_w = param(m, b + "mlp.c_proj.weight");
      l.down_b = param(m, b + "mlp.c_proj.bias");
      l.layout = m.at(b + "attn.c_attn.weight")->spec.layout;
    } else {
      const std::string b = "model.layers." + std::to_string(i) + ".";
      const std::string a = b + "self_attn.";
      l.norm1_w = param(m, b + "input_layernorm.weight");
      l.qkv_w = packed_span(m, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, {c.qkv_width(), C});
      if (c.qkv_bias)
        l.qkv_b = packed_span(m, {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}, {c.qkv_width()});
      l.out_w = param(m, a + "o_proj.weight");
      l.out_b = optional(m, a + "o_proj.bias");
      l.norm2_w = param(m, b + "post_attention_layernorm.weight");
      l.fc_w = param(m, b + "mlp.gate_proj.weight");
      l.up_w = param(m, b + "mlp.up_proj.weight");
      l.down_w = param(m, b + "mlp.down_proj.weight");
      l.fc_b = optional(m, b + "mlp.gate_proj.bias");
      l.up_b = optional(m, b + "mlp.up_proj.bias");
      l.down_b = optional(m, b + "mlp.down_proj.bias");
    }
    layers_.push_back(l);
    const Shape cache{options_.batch_size, c.num_kv_heads, options_.max_seq_len, c.head_dim};
    k_cache_.emplace_back(cache, DType::F32);
    v_cache_.emplace_back(cache, DType::F32);
  }
  scratch_ = std::make_unique<Scratch>();
  if (!gpt2) scratch_->rope = ops::make_rope_table(c.rope, static_cast<int>(options_.max_seq_len));
}

InferenceEngine::~InferenceEngine() = default;

void InferenceEngine::truncate(int64_t n) {
  ZT_CHECK(n >= 0 && n <= position_, "inference: truncate(", n, ") with ", position_, " cached tokens");
  position_ = n;
}

void InferenceEngine::ensure_scratch(int64_t rows) {
  Scratch& s = *scratch_;
  if (rows <= s.rows) return;
  const ModelConfig& c = config_;
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  auto f32 = [](Shape shape) { return OwnedTensor(std::move(shape), DType::F32); };
  s.x = f32({rows, C});
  s.ln = f32({rows, C});
  s.mean = f32({rows});
  s.rstd = f32({rows});
  s.qkv = f32({rows, c.qkv_width()});
  s.att = f32({rows, c.num_heads * c.head_dim});
  s.proj = f32({rows, C});
  s.fc = f32({rows, F});
  if (c.family == Family::Llama) s.up = f32({rows, F});
  s.act = f32({rows, F});
  s.rows = rows;
}

void InferenceEngine::forward(const Tensor& tokens, const Tensor& logits, LogitsFor which) {
  const ModelConfig& c = config_;
  ZT_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I32 && tokens.is_contiguous(),
           "inference: tokens must be contiguous i32 [B, Tn], got ", shape_str(tokens.shape()));
  const int64_t B = tokens.size(0), Tn = tokens.size(1), N = B * Tn, V = c.vocab_size;
  ZT_CHECK(B == options_.batch_size, "inference: batch of ", B, " rows for an engine of batch size ",
           options_.batch_size);
  ZT_CHECK(Tn >= 1, "inference: no tokens to run");
  if (Tn > remaining())
    ZT_THROW_INPUT("inference: ", Tn, " more tokens do not fit the cache (", position_, " of ", capacity(),
                   " positions used; the model's context is ", c.max_position_embeddings,
                   "): shorten the prompt or the generation");
  const Shape want = which == LogitsFor::LastToken ? Shape{B, V} : Shape{B, Tn, V};
  ZT_CHECK(logits.dtype() == DType::F32 && logits.is_contiguous() && logits.numel() == shape_numel(want),
           "inference: logits must be contiguous f32 ", shape_str(want), ", got ", shape_str(logits.shape()));

  ensure_scratch(N);
  Scratch& s = *scratch_;
  auto rows = [N](const OwnedTensor& t) { return t->narrow(0, 0, N); };
  const Tensor x = rows(s.x), ln = rows(s.ln), mean = rows(s.mean), rstd = rows(s.rstd), qkv = rows(s.qkv);
  const Tensor att = rows(s.att), proj = rows(s.proj), fc = rows(s.fc), act = rows(s.act);
  const Tensor up = c.family == Family::Llama ? rows(s.up) : Tensor();
  const bool gpt2 = c.family == Family::GPT2;
  const int Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t start = position_;

  ops::embedding_forward(x.reshape({B, Tn, c.hidden_size}), tokens, wte_,
                         gpt2 ? wpe_.narrow(0, start, Tn) : Tensor());
  const Tensor qkv3 = qkv.reshape({B, Tn, c.qkv_width()});
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    if (gpt2) {
      ops::layernorm_forward(ln, mean, rstd, x, l.norm1_w, l.norm1_b, c.norm_eps);
    } else {
      ops::rmsnorm_forward(ln, rstd, x, l.norm1_w, c.norm_eps);
    }
    ops::linear_forward(qkv, ln, l.qkv_w, l.qkv_b, l.layout);
    if (!gpt2) ops::rope_forward_inplace_at(qkv3, Hq, Hkv, s.rope, start);
    ops::kv_cache_write(k_cache_[i], v_cache_[i], qkv3, Hq, Hkv, start);
    ops::decode_attention_forward(att.reshape({B, Tn, Hq * c.head_dim}), qkv3, k_cache_[i], v_cache_[i], Hq, Hkv,
                                  start, scale);
    ops::linear_forward(proj, att, l.out_w, l.out_b, l.layout);
    ops::add_inplace(x, proj);
    if (gpt2) {
      ops::layernorm_forward(ln, mean, rstd, x, l.norm2_w, l.norm2_b, c.norm_eps);
      ops::linear_forward(fc, ln, l.fc_w, l.fc_b, l.layout);
      ops::gelu_forward(act, fc);
    } else {
      ops::rmsnorm_forward(ln, rstd, x, l.norm2_w, c.norm_eps);
      ops::linear_forward(fc, ln, l.fc_w, l.fc_b, l.layout);
      ops::linear_forward(up, ln, l.up_w, l.up_b, l.layout);
      ops::swiglu_forward(act, fc, up);
    }
    ops::linear_forward(proj, act, l.down_w, l.down_b, l.layout);
    ops::add_inplace(x, proj);
  }
  position_ += Tn;

  // Final norm and head: every row, or only each sequence's last row (a decode step
  // needs one row of logits; a long prompt's other rows would cost V x C each).
  Tensor h = x, h_ln = ln, h_mean = mean, h_rstd = rstd;
  if (which == LogitsFor::LastToken && Tn > 1) {
    for (int64_t b = 0; b < B; ++b)
      s.proj->narrow(0, b, 1).copy_from(x.narrow(0, b * Tn + Tn - 1, 1));
    h = s.proj->narrow(0, 0, B);
    h_ln = s.ln->narrow(0, 0, B);
    h_mean = s.mean->narrow(0, 0, B);
    h_rstd = s.rstd->narrow(0, 0, B);
  }
  if (gpt2) {
    ops::layernorm_forward(h_ln, h_mean, h_rstd, h, final_norm_w_, final_norm_b_, c.norm_eps);
  } else {
    ops::rmsnorm_forward(h_ln, h_rstd, h, final_norm_w_, c.norm_eps);
  }
  ops::linear_forward(logits.reshape({h_ln.size(0), V}), h_ln, head_, Tensor());
}

std::vector<float> InferenceEngine::forward(const std::vector<int32_t>& tokens) {
  ZT_CHECK(options_.batch_size == 1, "inference: the vector overload needs batch size 1");
  std::vector<int32_t> ids = tokens;
  std::vector<float> out(static_cast<size_t>(config_.vocab_size));
  forward(Tensor(ids.data(), {1, static_cast<int64_t>(ids.size())}, DType::I32),
          Tensor(out.data(), {1, config_.vocab_size}, DType::F32), LogitsFor::LastToken);
  return out;
}

}  // namespace zt::model
