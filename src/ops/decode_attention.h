// Attention of new query tokens against a KV cache (inference: prefill and decode).
//
// Cache layout, per layer: k_cache and v_cache f32 [B, Hkv, S, D], S = capacity in tokens;
// a head's keys are contiguous so one decode step streams through them. The new tokens
// sit at absolute positions start .. start+Tn-1; query i sees cache positions
// 0 .. start+i (causal with an offset). GQA as in attention.h: query head h reads kv head
// h / (Hq / Hkv).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::ops {

// Copies the k and v heads of qkv [B, Tn, (Hq + 2 Hkv) * D] (after RoPE) into the caches
// at positions start .. start+Tn-1. Needs start + Tn <= S.
void kv_cache_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                    int64_t start);

// out [B, Tn, Hq * D] (=): softmax(scale q k^T) v for the q heads of qkv against cache
// positions 0 .. start+i for query i. The tokens' own k/v must already be in the cache
// (kv_cache_write).
void decode_attention_forward(const Tensor& out, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                              int n_q_heads, int n_kv_heads, int64_t start, float scale);

}  // namespace zt::ops
