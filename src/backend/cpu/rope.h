// CPU kernels for rotary position embedding (HF Llama "rotate_half" convention).
//
// Accumulation rule: both kernels work in place. The forward rotates activations; the
// backward overwrites the activation gradient dqkv (=) with its inverse rotation (the
// transpose of the forward map). There are no parameters.
#pragma once
#include <cstdint>

namespace zt::cpu {

// qkv: [B, T, (Hq + 2 Hkv) * D] f32. cos/sin: [>= T, D/2] f32 tables, row t = position t.
// Rotates the first Hq + Hkv heads of every row (q and k); v heads are untouched.
// For i < D/2, with c = cos[t][i], s = sin[t][i]:
//   forward:  x[i] <- x[i] c - x[i+D/2] s,   x[i+D/2] <- x[i+D/2] c + x[i] s
//   backward: g[i] <- g[i] c + g[i+D/2] s,   g[i+D/2] <- g[i+D/2] c - g[i] s
void rope_forward_inplace(float* qkv, int64_t B, int64_t T, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
                          const float* cos, const float* sin);
void rope_backward_inplace(float* dqkv, int64_t B, int64_t T, int64_t n_q_heads, int64_t n_kv_heads,
                           int64_t head_dim, const float* cos, const float* sin);

}  // namespace zt::cpu
