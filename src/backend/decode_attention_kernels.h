// KV-cache attention kernels of both backends (ops/decode_attention.h has the contract and
// the cache layout): backend/cpu/decode_attention.cpp and backend/cuda/decode_attention.cu
// (stand-ins in backend/stub/cuda_kernels_stub.cpp for CPU-only builds). CUDA-free header.
//
// The wrapper has checked shapes, dtypes (f32) and devices:
//   qkv      [B, Tn, (Hq + 2 Hkv) * D]  the new tokens' packed q, k, v heads (after RoPE)
//   k_cache  [B, Hkv, S, D], v_cache the same; positions start .. start+Tn-1 are the new tokens
//   out      [B, Tn, Hq * D] (=)
// kv_cache_write overwrites the new tokens' cache rows; decode_attention_forward lets query
// i see cache positions 0 .. start+i. CUDA: asynchronous on the compute stream, head dim
// <= kAttentionMaxHeadDim (attention_kernels.h), larger is Unsupported.
#pragma once
#include <cstdint>

#include "backend/kernel_list.h"
#include "core/tensor.h"

#define ZT_DECODE_ATTENTION_KERNELS(K)                                                                               \
  K(void, kv_cache_write,                                                                                            \
    (const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int n_q_heads, int n_kv_heads, int64_t start)) \
  K(void, decode_attention_forward,                                                                                  \
    (const Tensor& out, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, int n_q_heads,              \
     int n_kv_heads, int64_t start, float scale))

namespace zt::cpu {
ZT_DECODE_ATTENTION_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_DECODE_ATTENTION_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
