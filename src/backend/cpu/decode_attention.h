// CPU kernels for KV-cache attention (see ops/decode_attention.h for the layout).
//
// Accumulation rule: kv_cache_write overwrites cache rows start..start+Tn-1; the forward
// overwrites out (=). Inference only: no backward, no parameters.
#pragma once
#include <cstdint>

namespace zt::cpu {

// qkv: [B, Tn, (Hq + 2 Hkv) * D]; caches [B, Hkv, S, D].
void kv_cache_write(float* k_cache, float* v_cache, const float* qkv, int64_t B, int64_t Tn, int64_t n_q_heads,
                    int64_t n_kv_heads, int64_t head_dim, int64_t capacity, int64_t start);

// out: [B, Tn, Hq * D]. Query i of the new tokens attends to cache positions 0..start+i.
void decode_attention_forward(float* out, const float* qkv, const float* k_cache, const float* v_cache, int64_t B,
                              int64_t Tn, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim, int64_t capacity,
                              int64_t start, float scale);

}  // namespace zt::cpu
