// CUDA rotary position embedding (rope.cu): the kernels behind ops/rope.h and
// ops/rope_offset.h for device tensors. No CUDA types here, so the ops/ wrappers can call
// these in every build (the CPU-only build links backend/stub/rope_stub.cpp, which throws
// Unsupported).
//
// Same meaning and rotation as backend/cpu/rope.h (HF "rotate_half": element i pairs with
// i + D/2), in place. qkv: contiguous [B, T, (Hq + 2 Hkv) * D], f32 or bf16 (math in f32,
// one rounding per element); the first Hq + Hkv heads of each row (q, k) are rotated, v is
// untouched. cos/sin: the RopeTable's device tables, contiguous f32 [P, D/2] (D =
// 2 * cos.size(1)); row (b, t) uses table row start + t, so start + T <= P (the wrapper
// checks). The backward overwrites dqkv (=) with the inverse rotation. Asynchronous on the
// compute stream.
#pragma once
#include <cstdint>

#include "backend/kernel_list.h"
#include "core/tensor.h"

namespace zt::cuda {

// start: the position of the first row (0 in training; the cache length when decoding).
#define ZT_ROPE_CUDA_KERNELS(K) \
  K(void, rope_forward_inplace,                                                                       \
    (const Tensor& qkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin, int64_t start)) \
  K(void, rope_backward_inplace,                                                                      \
    (const Tensor& dqkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin, int64_t start))

ZT_ROPE_CUDA_KERNELS(ZT_DECLARE_KERNEL)

}  // namespace zt::cuda
