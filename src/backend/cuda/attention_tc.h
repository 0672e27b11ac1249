// Tensor-core (mma.sync m16n8k16, bf16 or f16 operands) forward and backward of the CUDA
// causal GQA attention, for bf16 or f16 activations with head dim 64 or 128. CUDA-free
// header (core types only); defined in attention_tc.cu, which exists only in CUDA builds (ZT_WITH_CUDA): there is no CPU stub.
//
// Same contract as zt::cuda::attention_forward (backend/attention_kernels.h): qkv [B, T, (Hq + 2 Hkv) D],
// out [B, T, Hq D] (=), lse [B, Hq, T] f32 (=), causal, query head h reads kv head
// h / (Hq / Hkv), lse = natural-log log-sum-exp of the scaled scores, so
// attention_backward takes its out and lse unchanged. Asynchronous on the compute stream.
//
// attention.cu's forward and backward use them whenever the *_supports() check holds, unless
// ZT_ATTENTION_TC=0 is set in the environment (read once); otherwise the f32-FMA kernels of
// attention_kernels.cuh run (f32 activations, other head dims, and the tests' reference).
#pragma once
#include "core/tensor.h"

namespace zt::cuda {

// True when the tensor-core forward takes these tensors: bf16 or f16 qkv and out (one dtype), head dim 64 or
// 128, 16-byte aligned qkv and 4-byte aligned out, B and Hq at most 65535. Shapes, dtypes
// and devices otherwise as checked by ops::attention_forward.
bool attention_forward_tensor_core_supports(const Tensor& out, const Tensor& qkv, int n_q_heads, int n_kv_heads);

// The tensor-core forward; throws Unsupported when attention_forward_tensor_core_supports()
// does not hold. Expects the shape checks of ops::attention_forward already done.
// segment_starts: packed samples as in ops/attention.h (undefined: plain causal rows).
void attention_forward_tensor_core(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads,
                                   int n_kv_heads, float scale, const Tensor& segment_starts = Tensor());

// The tensor-core backward, same contract as zt::cuda::attention_backward: dqkv (=) every
// element. Needs what the forward needs plus dqkv/dout of qkv's dtype, dout and out 16-byte aligned.
bool attention_backward_tensor_core_supports(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                             const Tensor& out, int n_q_heads, int n_kv_heads);
void attention_backward_tensor_core(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                    const Tensor& lse, int n_q_heads, int n_kv_heads, float scale,
                                    const Tensor& segment_starts = Tensor());

// False when ZT_ATTENTION_TC=0 was set when first asked (read once per process).
bool attention_tensor_core_enabled();

}  // namespace zt::cuda
