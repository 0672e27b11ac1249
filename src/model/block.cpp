// The transformer block (see block.h). Every branch on the architecture is a feature flag
// of ModelConfig; the op calls are the same for training, prefill and decode except for the
// attention step (own tokens vs the KV cache).
#include "model/block.h"

#include <cmath>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/decode_attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/rope_offset.h"
#include "parallel/linear.h"

namespace zt::model {
namespace {

using F = Field;

// out = norm(x), saving the statistics the backward reads; the backward calls it again to
// recompute the same out (same bits).
void norm_forward(const ModelConfig& c, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                  const Tensor& w, const Tensor& b) {
  if (c.norm == NormKind::LayerNorm) {
    ops::layernorm_forward(out, mean, rstd, x, w, b, c.norm_eps);
  } else {
    ops::rmsnorm_forward(out, rstd, x, w, c.norm_eps);
  }
}

// dx (+= or =) and the norm's parameter gradients from d_out.
void norm_backward(const ModelConfig& c, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& d_out,
                   const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, GradWrite write) {
  if (c.norm == NormKind::LayerNorm) {
    ops::layernorm_backward(dx, dw, db, d_out, x, w, mean, rstd, write);
  } else {
    ops::rmsnorm_backward(dx, dw, d_out, x, w, rstd, write);
  }
}

float attention_scale(const ModelConfig& c) { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }

// qkv as the rope op takes it: [B, T, W], or with packed samples [1, B T, W], so that row
// b T + t takes the per-token table's row b T + t (make_token_rope_table).
Tensor rope_rows(const BlockCall& call, const Tensor& qkv3) {
  if (!call.segment_starts) return qkv3;
  return qkv3.reshape({1, qkv3.size(0) * qkv3.size(1), qkv3.size(2)});
}

// q, k rotated (Rotary), then attention over the sequence or the cache.
void attention(const ModelConfig& c, const BlockCall& call, const BlockActivations& a) {
  const int64_t B = call.batch, T = call.tokens;
  const int Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads);
  const Tensor qkv3 = a.qkv.reshape({B, T, c.qkv_width()});
  const Tensor att3 = a.att.reshape({B, T, Hq * c.head_dim});
  const bool rotary = c.position == PositionKind::Rotary;
  if (rotary) ZT_CHECK(call.rope != nullptr, "block: rotary positions need a rope table");
  if (!call.cache) {
    ZT_CHECK(call.start == 0, "block: without a KV cache the tokens start at position 0");
    const Tensor segments = call.segment_starts ? *call.segment_starts : Tensor();
    if (rotary) ops::rope_forward_inplace(rope_rows(call, qkv3), Hq, Hkv, *call.rope);
    if (call.pass == BlockPass::Forward)
      ops::attention_forward(att3, a.lse, qkv3, Hq, Hkv, attention_scale(c), segments);
    return;
  }
  ZT_CHECK(call.pass == BlockPass::Forward, "block: a KV-cache call is never a recompute");
  if (rotary) ops::rope_forward_inplace_at(qkv3, Hq, Hkv, *call.rope, call.start);
  ops::kv_cache_write(call.cache->k, call.cache->v, qkv3, Hq, Hkv, call.start);
  ops::decode_attention_forward(att3, qkv3, call.cache->k, call.cache->v, Hq, Hkv, call.start, attention_scale(c));
}

bool dropout_on(const BlockCall& call) { return call.dropout.p > 0.0f; }
Philox site_rng(const BlockCall& call, int site) {
  return dropout_rng(call.dropout.seed, call.dropout.step, call.layer, site);
}

// The bias that adds to a linear weight field's output.
Field bias_of(Field weight) {
  switch (weight) {
    case F::QkvWeight:
      return F::QkvBias;
    case F::AttnOutWeight:
      return F::AttnOutBias;
    case F::MlpInWeight:
      return F::MlpInBias;
    default:
      return F::MlpOutBias;
  }
}

// The parallel linear of a block's weight field (parallel/linear.h): its kind from the
// weights table's split, the call's tensor-parallel group and recipe, the field's adapters.
parallel::Linear block_linear(const ModelConfig& c, const UnitWeights& w, const BlockCall& call, Field f,
                              const parallel::LinearLora* lora) {
  parallel::Linear l;
  l.kind = linear_kind(tp_split(c, f));
  l.group = call.tp;
  l.weight = w[f];
  l.bias = w[bias_of(f)];
  l.layout = w.layout(f);
  l.lora = lora;
  l.precision = call.precision;
  return l;
}

// y (=) the field's linear of x, its LoRA adapters added (model/lora.h).
void linear_forward(const ModelConfig& c, const UnitWeights& w, const BlockCall& call, Field f, const Tensor& y,
                    const Tensor& x) {
  const parallel::LinearLora lora = call.lora ? linear_lora(*call.lora, call.layer, f) : parallel::LinearLora();
  parallel::linear_forward(block_linear(c, w, call, f, call.lora ? &lora : nullptr), y, x);
}

// dx (=, then the adapters' share +=) and the field's gradients (+=) from dy.
void linear_backward(const ModelConfig& c, const UnitWeights& w, const UnitWeights& g, const BlockCall& call, Field f,
                     const Tensor& dx, const Tensor& dy, const Tensor& x) {
  const parallel::LinearLora lora = call.lora ? linear_lora(*call.lora, call.layer, f) : parallel::LinearLora();
  parallel::linear_backward(block_linear(c, w, call, f, call.lora ? &lora : nullptr), {g[f], g[bias_of(f)]}, dx, dy, x);
}

}  // namespace

parallel::LinearKind linear_kind(TpSplit split) {
  switch (split) {
    case TpSplit::Output:
      return parallel::LinearKind::Column;
    case TpSplit::Input:
      return parallel::LinearKind::Row;
    default:
      return parallel::LinearKind::Replicated;  // None (a vocabulary split is the head's, not a linear's)
  }
}

Philox dropout_rng(uint64_t seed, uint64_t step, int layer, int site) {
  const uint64_t stream = (step << 24) ^ (static_cast<uint64_t>(layer + 1) << 4) ^ static_cast<uint64_t>(site);
  return Philox(seed ^ 0x5EEDD50Full, stream);
}

void block_forward(const ModelConfig& c, const UnitWeights& w, const BlockCall& call, const BlockActivations& a,
                   const BlockScratch& s, const Tensor& x_in, const Tensor& x_out) {
  const Tensor& ln = s.ln;
  const Tensor& proj = s.proj;

  // Attention branch.
  norm_forward(c, ln, a.ln1_mean, a.ln1_rstd, x_in, w[F::Norm1Weight], w[F::Norm1Bias]);
  linear_forward(c, w, call, F::QkvWeight, a.qkv, ln);
  attention(c, call, a);
  linear_forward(c, w, call, F::AttnOutWeight, proj, a.att);
  if (dropout_on(call)) ops::dropout_forward(proj, proj, call.dropout.p, site_rng(call, 0));
  // The residual add, fused with the MLP branch's norm: x_mid = x_in + proj, ln = norm(x_mid).
  if (c.norm == NormKind::LayerNorm) {
    ops::add_layernorm_forward(a.x_mid, ln, a.ln2_mean, a.ln2_rstd, x_in, proj, w[F::Norm2Weight], w[F::Norm2Bias],
                               c.norm_eps);
  } else {
    ops::add_rmsnorm_forward(a.x_mid, ln, a.ln2_rstd, x_in, proj, w[F::Norm2Weight], c.norm_eps);
  }

  // MLP branch.
  linear_forward(c, w, call, F::MlpInWeight, a.fc, ln);  // [gate | up]: one GEMM
  if (c.mlp == MlpKind::Gelu) {
    ops::gelu_forward(a.act, a.fc);
  } else {
    const int64_t Fi = c.intermediate_size;
    ops::swiglu_forward(a.act, a.fc.narrow(1, 0, Fi), a.fc.narrow(1, Fi, Fi));
  }
  if (call.pass == BlockPass::Recompute) return;  // the backward reads act, not x_out
  linear_forward(c, w, call, F::MlpOutWeight, proj, a.act);
  if (dropout_on(call)) ops::dropout_forward(proj, proj, call.dropout.p, site_rng(call, 1));
  ops::add(x_out, a.x_mid, proj);
}

void block_backward(const ModelConfig& c, const UnitWeights& w, const UnitWeights& g, const BlockCall& call,
                    const BlockActivations& a, const BlockScratch& s, const BlockGradScratch& d, const Tensor& x_in,
                    const Tensor& dx) {
  ZT_CHECK(call.cache == nullptr && call.start == 0, "block_backward: training blocks have no KV cache");
  const int64_t B = call.batch, T = call.tokens;
  const int Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads);

  // MLP branch: dx is the gradient of the block output.
  Tensor d_branch = dx;
  if (dropout_on(call)) {
    ops::dropout_backward(d.d_branch, dx, call.dropout.p, site_rng(call, 1));
    d_branch = d.d_branch;
  }
  linear_backward(c, w, g, call, F::MlpOutWeight, d.d_act, d_branch, a.act);
  norm_forward(c, s.ln, a.ln2_mean, a.ln2_rstd, a.x_mid, w[F::Norm2Weight], w[F::Norm2Bias]);
  if (c.mlp == MlpKind::Gelu) {
    ops::gelu_backward(d.d_fc, d.d_act, a.fc);
  } else {
    const int64_t Fi = c.intermediate_size;
    ops::swiglu_backward(d.d_fc.narrow(1, 0, Fi), d.d_fc.narrow(1, Fi, Fi), d.d_act, a.fc.narrow(1, 0, Fi),
                         a.fc.narrow(1, Fi, Fi));
  }
  // One GEMM each for d[gate; up] and for d_ln = d_gate W_gate + d_up W_up (K = 2F).
  linear_backward(c, w, g, call, F::MlpInWeight, d.d_ln, d.d_fc, s.ln);
  norm_backward(c, dx, g[F::Norm2Weight], g[F::Norm2Bias], d.d_ln, a.x_mid, w[F::Norm2Weight], a.ln2_mean, a.ln2_rstd,
                GradWrite::Accumulate);
  // dx is now the gradient at x_mid: the norm's backward added the branch's share.

  // Attention branch.
  d_branch = dx;
  if (dropout_on(call)) {
    ops::dropout_backward(d.d_branch, dx, call.dropout.p, site_rng(call, 0));
    d_branch = d.d_branch;
  }
  linear_backward(c, w, g, call, F::AttnOutWeight, d.d_att, d_branch, a.att);
  const Tensor qkv3 = a.qkv.reshape({B, T, c.qkv_width()});
  const Tensor dqkv3 = d.d_qkv.reshape({B, T, c.qkv_width()});
  ops::attention_backward(dqkv3, d.d_att.reshape({B, T, Hq * c.head_dim}), qkv3, a.att.reshape({B, T, Hq * c.head_dim}),
                          a.lse, Hq, Hkv, attention_scale(c),
                          call.segment_starts ? *call.segment_starts : Tensor());
  if (c.position == PositionKind::Rotary) ops::rope_backward_inplace(rope_rows(call, dqkv3), Hq, Hkv, *call.rope);
  norm_forward(c, s.ln, a.ln1_mean, a.ln1_rstd, x_in, w[F::Norm1Weight], w[F::Norm1Bias]);
  linear_backward(c, w, g, call, F::QkvWeight, d.d_ln, d.d_qkv, s.ln);
  norm_backward(c, dx, g[F::Norm1Weight], g[F::Norm1Bias], d.d_ln, x_in, w[F::Norm1Weight], a.ln1_mean, a.ln1_rstd,
                GradWrite::Accumulate);
  // dx is now the gradient of the block input.
}

void embed_forward(const ModelConfig& c, const UnitWeights& embed, const Tensor& x, const Tensor& tokens,
                   int64_t start) {
  const int64_t T = tokens.size(1);
  const Tensor positions =
      c.position == PositionKind::Learned ? embed[F::PositionEmbedding].narrow(0, start, T) : Tensor();
  ops::embedding_forward(x, tokens, embed[F::TokenEmbedding], positions);
}

void embed_forward_at(const ModelConfig& c, const UnitWeights& embed, const Tensor& x, const Tensor& tokens,
                      const Tensor& positions, const Tensor& scratch) {
  ops::embedding_forward(x, tokens, embed[F::TokenEmbedding], Tensor());
  if (c.position != PositionKind::Learned) return;
  // The position rows are gathered as token rows are (a lookup by position id), then added:
  // in f32 the same one rounding as the fused wte + wpe of embed_forward. The position ids
  // are ours (set_packed_samples, from checked segment starts: each in [0, T)), so the gather
  // is the unchecked one (no host wait on CUDA); the token ids above keep their check.
  const Tensor rows = scratch.reshape(x.shape());
  ops::gather_rows(rows, embed[F::PositionEmbedding], positions);
  ops::add(x, x, rows);
}

void embed_backward(const ModelConfig& c, const UnitWeights& g, const Tensor& dx, const Tensor& tokens,
                    const Tensor& positions) {
  const bool learned = c.position == PositionKind::Learned;
  if (!positions.has_data() || !learned) {
    ops::embedding_backward(g[F::TokenEmbedding], learned ? g[F::PositionEmbedding] : Tensor(), dx, tokens);
    return;
  }
  ops::embedding_backward(g[F::TokenEmbedding], Tensor(), dx, tokens);
  // dwpe[positions[b, t]] += dx[b, t]. The position ids are ours (set_packed_samples, from
  // segment starts checked on the host: each in [0, T)), so the scatter is the unchecked one
  // (no host wait on CUDA; the same sums as embedding_backward's); the token ids above keep
  // their check. A frozen wpe has no gradient (nothing to add).
  if (g[F::PositionEmbedding].has_data()) ops::scatter_add_rows(g[F::PositionEmbedding], dx, positions);
}

void make_token_rope_table(ops::RopeTable& out, const ops::RopeTable& table, const Tensor& positions) {
  const int64_t N = positions.numel(), half = table.cos->size(1);
  if (out.max_positions != N || out.head_dim != table.head_dim) {
    out.cos = OwnedTensor({N, half}, DType::F32, table.cos->device());
    out.sin = OwnedTensor({N, half}, DType::F32, table.cos->device());
    out.max_positions = static_cast<int>(N);
    out.head_dim = table.head_dim;
  }
  // Trusted ids (positions from checked segment starts, each in [0, T) and T <= the table's
  // rows): unchecked gathers, so building the table never waits for the device.
  ops::gather_rows(out.cos, table.cos, positions);
  ops::gather_rows(out.sin, table.sin, positions);
}

void final_norm_forward(const ModelConfig& c, const UnitWeights& head, const Tensor& out, const Tensor& mean,
                        const Tensor& rstd, const Tensor& x) {
  norm_forward(c, out, mean, rstd, x, head[F::FinalNormWeight], head[F::FinalNormBias]);
}

void final_norm_backward(const ModelConfig& c, const UnitWeights& head, const UnitWeights& g, const Tensor& dx,
                         const Tensor& d_out, const Tensor& x, const Tensor& mean, const Tensor& rstd) {
  norm_backward(c, dx, g[F::FinalNormWeight], g[F::FinalNormBias], d_out, x, head[F::FinalNormWeight], mean, rstd,
                GradWrite::Overwrite);
}

const Tensor& head_matrix(const ModelConfig& c, const UnitWeights& embed, const UnitWeights& head) {
  return c.tie_word_embeddings ? embed[F::TokenEmbedding] : head[F::LmHead];
}

}  // namespace zt::model
