// Causal GQA self-attention kernels of both backends (ops/attention.h has the contract):
// backend/cpu/attention.cpp (f32) and backend/cuda/attention.cu (flash-attention style;
// stand-ins in backend/stub/cuda_kernels_stub.cpp for CPU-only builds). CUDA-free header.
//
// Same meaning, shapes and accumulation rule as ops/attention.h, whose wrapper has already
// checked shapes, dtypes and devices:
//   qkv  [B, T, (Hq + 2 Hkv) * D]  packed q heads, k heads, v heads (after RoPE)
//   out  [B, T, Hq * D]            (=)
//   lse  [B, Hq, T] f32            (=) row log-sum-exp of the scaled scores, saved for backward
//   dqkv [B, T, (Hq + 2 Hkv) * D]  (=) activation gradient, every element written
//   segment_starts  [B, T] i32 or undefined: packed samples (ops/attention.h); token t attends
//                   to keys segment_starts[b, t] .. t only. Undefined: plain causal rows.
// Causal; query head h reads kv head h / (Hq / Hkv). qkv, out, dout and dqkv share one dtype,
// f32 or bf16 (arithmetic in f32 either way); lse is always f32. Head dim D <= 128; a larger
// D throws Unsupported. Asynchronous on the compute stream; no host synchronisation; memory
// is O(B Hq T) scratch (no T x T buffer). Deterministic: same inputs, same bits.
#pragma once
#include "backend/kernel_list.h"
#include "core/tensor.h"

namespace zt::cuda {
// Largest head dim the CUDA kernels support.
constexpr int kAttentionMaxHeadDim = 128;
}  // namespace zt::cuda

#define ZT_ATTENTION_KERNELS(K)                                                                                      \
  K(void, attention_forward,                                                                                         \
    (const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads, float scale,             \
     const Tensor& segment_starts))                                                                                  \
  K(void, attention_backward,                                                                                        \
    (const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_q_heads, \
     int n_kv_heads, float scale, const Tensor& segment_starts))
// CUDA only: the two above take the tensor-core kernels (attention_tc.h) for bf16/f16 with
// head dim 64 or 128, unless ZT_ATTENTION_TC=0. These always run the f32-FMA kernels (every
// dtype and head dim <= 128): the reference the tensor-core kernels are tested against.
#define ZT_ATTENTION_CUDA_ONLY_KERNELS(K)                                                                            \
  K(void, attention_forward_fma,                                                                                     \
    (const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads, float scale,             \
     const Tensor& segment_starts))                                                                                  \
  K(void, attention_backward_fma,                                                                                    \
    (const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_q_heads, \
     int n_kv_heads, float scale, const Tensor& segment_starts))

namespace zt::cpu {
ZT_ATTENTION_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_ATTENTION_KERNELS(ZT_DECLARE_KERNEL)
ZT_ATTENTION_CUDA_ONLY_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
