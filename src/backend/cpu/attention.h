// CPU causal self-attention with grouped-query heads on packed qkv.
//
// Accumulation rule: the forward overwrites out and lse; the backward overwrites the
// activation gradient dqkv (=), all of it (q, k and v parts). No parameters.
#pragma once
#include <cstdint>

namespace zt::cpu {

// qkv: [B, T, (Hq + 2 Hkv) * D] (q heads, then k heads, then v heads); query head h reads
// kv head h / (Hq / Hkv). out: [B, T, Hq * D]. lse: [B, Hq, T] = logsumexp_j<=i(scale q_i.k_j).
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t n_q_heads,
                       int64_t n_kv_heads, int64_t head_dim, float scale);

// dqkv (=): [B, T, (Hq + 2 Hkv) * D]. dout, out: [B, T, Hq * D]. Probabilities are recomputed
// from q, k and lse; D_i = rowsum(dout_i * out_i).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim, float scale);

}  // namespace zt::cpu
