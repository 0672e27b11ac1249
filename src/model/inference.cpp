// KV-cache inference engine: the training Transformer's block function (model/block.h)
// run on Tn new tokens at a position offset, with keys/values appended to a per-layer cache.
#include "model/inference.h"

#include <string>

#include "core/error.h"
#include "model/block.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "ops/copy.h"
#include "ops/linear.h"

namespace zt::model {

// Activations for up to `rows` = B * Tn tokens; decode steps reuse a prefill's buffers.
// One set of block activations serves every layer (nothing is kept for a backward).
struct InferenceEngine::Scratch {
  int64_t rows = 0;
  OwnedTensor x[2];  // the residual stream, in and out of a block in turn
  OwnedTensor x_mid, mean, rstd, mean2, rstd2, qkv, att, lse, fc, act, ln, proj;
  OwnedTensor tokens, logits;  // device copies when the caller's tensors live elsewhere
};

InferenceEngine::InferenceEngine(const Transformer& model, InferenceOptions options)
    : InferenceEngine(model.config(), model.registry(), options) {}

InferenceEngine::InferenceEngine(const ModelConfig& config, const ParameterRegistry& registry, InferenceOptions options)
    : config_(config), registry_(registry), options_(options) {
  config_.validate("model config");
  const ModelConfig& c = config_;
  if (options_.max_seq_len <= 0) options_.max_seq_len = c.max_position_embeddings;
  if (options_.max_seq_len > c.max_position_embeddings)
    ZT_THROW_INPUT("inference cache of ", options_.max_seq_len, " tokens exceeds the model's max_position_embeddings (",
                   c.max_position_embeddings, "): use a shorter maximum sequence length");
  ZT_CHECK(options_.batch_size >= 1, "inference: batch_size must be positive");
  ZT_CHECK(registry_.size() == static_cast<size_t>(c.num_layers) + 2, "inference: the registry has ", registry_.size(),
           " units for a model of ", c.num_layers, " layers");
  device_ = embed_unit(registry_).device();
  registry_.for_each([&](const Unit& u, const ParamEntry& p) {
    ZT_CHECK(u.has_params(), "inference: unit ", u.name(), " has no parameters (gathered?)");
    ZT_CHECK(p.value.device() == device_, "inference: ", p.name(), " is on ", p.value.device().name(), ", not ",
             device_.name());
    // The activations and KV cache are f32; the CPU kernels also read 16-bit weights in
    // place, the CUDA ones want one dtype per GEMM.
    ZT_CHECK(device_.is_cpu() || p.value.dtype() == DType::F32, "inference: ", p.name(), " is ",
             dtype_name(p.value.dtype()), " on ", device_.name(),
             "; the GPU inference engine runs f32 parameters (load the model with f32 weights)");
  });

  const Shape cache{options_.batch_size, c.num_kv_heads, options_.max_seq_len, c.head_dim};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    k_cache_.emplace_back(cache, DType::F32, device_);
    v_cache_.emplace_back(cache, DType::F32, device_);
  }
  if (c.position == PositionKind::Rotary)
    rope_ = ops::make_rope_table(c.rope, static_cast<int>(options_.max_seq_len), device_);
  scratch_ = std::make_unique<Scratch>();
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
  const int64_t C = c.hidden_size;
  auto f32 = [&](Shape shape) { return OwnedTensor(std::move(shape), DType::F32, device_); };
  s.x[0] = f32({rows, C});
  s.x[1] = f32({rows, C});
  s.x_mid = f32({rows, C});
  s.ln = f32({rows, C});
  s.proj = f32({rows, C});
  s.mean = f32({rows});
  s.rstd = f32({rows});
  s.mean2 = f32({rows});
  s.rstd2 = f32({rows});
  s.qkv = f32({rows, c.qkv_width()});
  s.att = f32({rows, c.num_heads * c.head_dim});
  s.fc = f32({rows, c.mlp_in_width()});
  s.act = f32({rows, c.intermediate_size});
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
  // Token ids on the engine's device.
  Tensor ids = tokens;
  if (tokens.device() != device_) {
    s.tokens = OwnedTensor(tokens.shape(), DType::I32, device_);
    ops::copy(s.tokens, tokens);
    ids = s.tokens;
  }
  const int64_t start = position_;

  embed_forward(c, UnitWeights(embed_unit(registry_), Storage::Values), rows(s.x[0]).reshape({B, Tn, c.hidden_size}),
                ids, start);
  const BlockActivations acts{rows(s.x_mid), rows(s.mean),  rows(s.rstd),  rows(s.qkv), rows(s.att),
                              Tensor(),      rows(s.mean2), rows(s.rstd2), rows(s.fc),  rows(s.act)};
  const BlockScratch scratch{rows(s.ln), rows(s.proj)};
  int cur = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const KvCacheLayer cache{k_cache_[static_cast<size_t>(l)], v_cache_[static_cast<size_t>(l)]};
    BlockCall call;
    call.layer = static_cast<int>(l);
    call.batch = B;
    call.tokens = Tn;
    call.start = start;
    call.rope = &rope_;
    call.cache = &cache;
    block_forward(c, UnitWeights(block_unit(registry_, l), Storage::Values), call, acts, scratch, rows(s.x[cur]),
                  rows(s.x[1 - cur]));
    cur = 1 - cur;
  }
  position_ += Tn;

  // Final norm and head: every row, or only each sequence's last row (a decode step
  // needs one row of logits; a long prompt's other rows would cost V x C each).
  Tensor h = rows(s.x[cur]);
  int64_t h_rows = N;
  if (which == LogitsFor::LastToken && Tn > 1) {
    for (int64_t b = 0; b < B; ++b) ops::copy(s.proj->narrow(0, b, 1), h.narrow(0, b * Tn + Tn - 1, 1));
    h = s.proj->narrow(0, 0, B);
    h_rows = B;
  }
  const Tensor h_ln = s.ln->narrow(0, 0, h_rows);
  const UnitWeights head(head_unit(registry_), Storage::Values);
  final_norm_forward(c, head, h_ln, s.mean->narrow(0, 0, h_rows), s.rstd->narrow(0, 0, h_rows), h);
  const Tensor W = head_matrix(c, UnitWeights(embed_unit(registry_), Storage::Values), head).narrow(0, 0, V);
  const Tensor out = logits.reshape({h_rows, V});
  if (logits.device() == device_) {
    ops::linear_forward(out, h_ln, W, Tensor());
  } else {
    if (s.logits->numel() != out.numel()) s.logits = OwnedTensor({h_rows, V}, DType::F32, device_);
    ops::linear_forward(s.logits, h_ln, W, Tensor());
    ops::copy(out, s.logits);
  }
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
