// One transformer block, for training (forward and backward), prefill and decode: the
// only copy of the model's math. The architecture flags of ModelConfig pick the variant:
//
//   x_mid = x + proj(attn(pos(qkv(norm1(x)))))       pos: RoPE for PositionKind::Rotary
//   x_out = x_mid + down(mlp(fc(norm2(x_mid))))      mlp: gelu, or silu(gate) * up ([gate; up] one GEMM)
//
// Without a KV cache the block attends over its own T tokens (training, full recompute);
// with one it rotates its tokens at positions start .. start+T-1, appends their keys and
// values to the cache and attends over everything cached (prefill, decode).
//
// The embedding (token + learned position rows) and the final norm are here too, so that
// Transformer (training) and InferenceEngine (generation) share every op call.
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/weights.h"
#include "ops/rope.h"
#include "parallel/linear.h"

namespace zt::model {

// One layer's activations that the backward reads (views; [N, ...] with N = B * T).
// Inference passes one set shared by all layers; it never reads them back.
struct BlockActivations {
  Tensor x_mid;               // residual stream after the attention branch [N, C]
  Tensor ln1_mean, ln1_rstd;  // norm statistics (f32 [N]); LayerNorm also the mean
  Tensor qkv;                 // after RoPE [N, (Hq + 2 Hkv) D]
  Tensor att;                 // [N, Hq D]
  Tensor lse;                 // [B, Hq, T]; written only without a cache
  Tensor ln2_mean, ln2_rstd;
  Tensor fc;   // Gelu: pre-GELU [N, F]; GatedSilu: [gate | up] [N, 2F]
  Tensor act;  // [N, F]
};

// Shared scratch: the normalised branch input (recomputed by the backward from the saved
// statistics rather than kept per layer) and a branch output.
struct BlockScratch {
  Tensor ln;    // [N, C]
  Tensor proj;  // [N, C]
};

// Backward scratch ([N, ...] like the activations).
struct BlockGradScratch {
  Tensor d_ln, d_branch, d_qkv, d_att, d_fc, d_act;
};

// One layer's KV cache: f32 [B, Hkv, S, D] each (ops/decode_attention.h).
struct KvCacheLayer {
  Tensor k, v;
};

// Residual dropout of a training step: masks depend on (seed, step, layer, site) only.
struct ResidualDropout {
  float p = 0.0f;  // 0: off
  uint64_t seed = 0, step = 0;
};
Philox dropout_rng(uint64_t seed, uint64_t step, int layer, int site);

// Recompute: activation checkpointing's second forward, right before block_backward. It
// rewrites what the backward reads (norm statistics, rotated qkv, x_mid, fc, act) from the
// same x_in, bit for bit as the first pass, except what the first pass saved or the
// backward never reads: the attention output and log-sum-exp are taken from `a` as saved
// (no attention kernel), and the MLP-out GEMM, its dropout and the residual add are
// skipped (x_out is neither read nor written).
enum class BlockPass { Forward, Recompute };

struct BlockCall {
  int layer = 0;
  BlockPass pass = BlockPass::Forward;
  int64_t batch = 0, tokens = 0;         // B, T: rows are B * T tokens
  int64_t start = 0;                     // position of the first token (tokens already in the cache)
  const ops::RopeTable* rope = nullptr;  // PositionKind::Rotary: rows up to start + T
  const KvCacheLayer* cache = nullptr;   // null: attend over these T tokens only (start 0)
  // Packed samples (SFT packing, HF's position_ids): per token the index in its row of its
  // sample's first token, i32 [B, T] on the model's device; attention stays inside each
  // sample, and `rope` then holds one row per token (B * T rows: the rotation at the token's
  // position within its sample, make_token_rope_table). Null: each row one sequence.
  const Tensor* segment_starts = nullptr;
  ResidualDropout dropout;
  // LoRA adapters on the block's linears (model/lora.h); null: none.
  const BlockLora* lora = nullptr;
  // The tensor-parallel group of the block's linears (parallel/linear.h; none: one rank,
  // the weights whole) and their precision recipe.
  parallel::Group tp;
  parallel::Precision precision = parallel::Precision::Activations;
};

// The parallel linear's kind for a weight field's tensor-parallel split (the weights
// table's TpSplit): Output -> Column, Input -> Row, None -> Replicated.
parallel::LinearKind linear_kind(TpSplit split);

// x_out = block(x_in); both [N, C]. Saves what block_backward reads in `a`.
void block_forward(const ModelConfig& config, const UnitWeights& w, const BlockCall& call, const BlockActivations& a,
                   const BlockScratch& s, const Tensor& x_in, const Tensor& x_out);
// dx: in = gradient of the block output, out = gradient of its input; parameter gradients
// accumulate (+=) into `g`. Needs the activations of block_forward on x_in (no cache).
void block_backward(const ModelConfig& config, const UnitWeights& w, const UnitWeights& g, const BlockCall& call,
                    const BlockActivations& a, const BlockScratch& s, const BlockGradScratch& d, const Tensor& x_in,
                    const Tensor& dx);

// x [B, T, C] (=) token rows + (learned positions) rows start .. start+T-1.
void embed_forward(const ModelConfig& config, const UnitWeights& embed, const Tensor& x, const Tensor& tokens,
                   int64_t start);
// Packed samples: x [B, T, C] (=) token rows + (learned positions) rows positions[b, t]
// (i32 [B, T] on x's device: each token's position within its sample). `scratch` [B T, C]
// (x's dtype) holds the gathered position rows.
void embed_forward_at(const ModelConfig& config, const UnitWeights& embed, const Tensor& x, const Tensor& tokens,
                      const Tensor& positions, const Tensor& scratch);
// The embedding's parameter gradients (+=) from dx [B, T, C] (start 0), or with packed
// samples' positions (undefined: rows 0 .. T-1).
void embed_backward(const ModelConfig& config, const UnitWeights& embed_grads, const Tensor& dx, const Tensor& tokens,
                    const Tensor& positions = Tensor());

// Packed samples with rotary positions: a table of B * T rows, row b T + t the rotation of
// position positions[b, t] (gathered from `table`, so the bits are those of the unpacked
// rows). Rebuilt into `out` (reallocated only when its size changes).
void make_token_rope_table(ops::RopeTable& out, const ops::RopeTable& table, const Tensor& positions);

// out = final_norm(x), saving the statistics (mean: LayerNorm only).
void final_norm_forward(const ModelConfig& config, const UnitWeights& head, const Tensor& out, const Tensor& mean,
                        const Tensor& rstd, const Tensor& x);
// dx (=) from d_out; the head's norm gradients accumulate.
void final_norm_backward(const ModelConfig& config, const UnitWeights& head, const UnitWeights& head_grads,
                         const Tensor& dx, const Tensor& d_out, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd);

// The output projection [Vp, C]: the token embedding when tied, else the head's own.
const Tensor& head_matrix(const ModelConfig& config, const UnitWeights& embed, const UnitWeights& head);

}  // namespace zt::model
