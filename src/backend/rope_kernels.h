// Rotary position embedding kernels of both backends, behind ops/rope.h and
// ops/rope_offset.h: backend/cpu/rope.cpp (f32) and backend/cuda/rope.cu (f32, bf16, f16;
// math in f32, one rounding per element). No CUDA types here.
//
// HF "rotate_half": element i pairs with i + D/2, in place. For i < D/2, with c = cos[t][i],
// s = sin[t][i]:
//   forward:  x[i] <- x[i] c - x[i+D/2] s,   x[i+D/2] <- x[i+D/2] c + x[i] s
//   backward: g[i] <- g[i] c + g[i+D/2] s,   g[i+D/2] <- g[i+D/2] c - g[i] s
// qkv: contiguous [B, T, (Hq + 2 Hkv) * D]; the first Hq + Hkv heads of each row (q, k) are rotated, v is
// untouched. cos/sin: the RopeTable's device tables, contiguous f32 [P, D/2] (D =
// 2 * cos.size(1)); row (b, t) uses table row start + t, so start + T <= P (the wrapper
// checks). The backward overwrites dqkv (=) with the inverse rotation. CUDA: asynchronous on
// the compute stream.
#pragma once
#include <cstdint>

#include "backend/kernel_list.h"
#include "core/tensor.h"

// start: the position of the first row (0 in training; the cache length when decoding).
#define ZT_ROPE_KERNELS(K)                                                                                   \
  K(void, rope_forward_inplace,                                                                              \
    (const Tensor& qkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin, int64_t start)) \
  K(void, rope_backward_inplace,                                                                             \
    (const Tensor& dqkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin, int64_t start))

namespace zt::cpu {
ZT_ROPE_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_ROPE_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
