// Causal multi-head self-attention with grouped-query heads (GQA): query head h reads
// key/value head h / (Hq / Hkv). No T x T matrix is kept between forward and backward:
// forward saves the per-row log-sum-exp and backward recomputes the probabilities.
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// qkv: [B, T, (Hq + 2 Hkv) * D] packed (q heads, k heads, v heads), after RoPE.
// out: [B, T, Hq * D].  lse: [B, Hq, T] f32, saved for backward.
// scale is usually 1/sqrt(D). qkv and out are f32, or on CUDA also bf16 (same dtype for
// every activation of a call: qkv, out, dout, dqkv); lse is always f32. The CUDA kernels
// support head dims D <= 128.
//
// segment_starts: packed samples (SFT packing; what HF does with position_ids and
// flash-attn's varlen kernels): i32 [B, T] on qkv's device, for each token the index in its
// row of its sample's first token, so token t attends to keys segment_starts[b, t] .. t
// only (never across a sample boundary). Each row's values are a valid segmentation:
// s[0] == 0 and s[t] is either t (a sample starts at t) or s[t - 1]. Undefined (the
// default): every row is one causal sequence, with no per-token array at all.
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                       float scale, const Tensor& segment_starts = Tensor());

// dqkv (=): [B, T, (Hq + 2 Hkv) * D]. segment_starts: as the forward's (the same tensor).
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_q_heads, int n_kv_heads, float scale, const Tensor& segment_starts = Tensor());

// Throws BadInput unless `segment_starts` (i32 [B, T] on the host) is a valid segmentation
// as above; the ops check host tensors with it (a device tensor is the caller's to build).
void check_segment_starts(const Tensor& segment_starts, int64_t B, int64_t T);

}  // namespace zt::ops
