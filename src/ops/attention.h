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
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                       float scale);

// dqkv (=): [B, T, (Hq + 2 Hkv) * D].
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_q_heads, int n_kv_heads, float scale);

}  // namespace zt::ops
