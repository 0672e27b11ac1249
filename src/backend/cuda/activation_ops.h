// CUDA kernels for the activations of ops/activation.h (activation.cu): GELU (tanh form),
// SiLU and SwiGLU, forward and backward. Same meaning and accumulation rule as the ops/
// functions (every output is overwritten, =), which have validated the tensors.
// Activations are f32 or bf16 (all tensors of one call share the dtype); the arithmetic is
// f32. Outputs may alias inputs element for element (out == inp, dinp == dout, ...).
// gelu/silu take contiguous tensors; swiglu takes [..., F] views whose rows may be strided
// (e.g. the two column halves of a fused [N, 2F] gate/up buffer).
#pragma once
#include "backend/kernel_list.h"
#include "core/tensor.h"

namespace zt::cuda {

#define ZT_ACTIVATION_CUDA_KERNELS(K) \
  K(void, gelu_forward, (const Tensor& out, const Tensor& inp))                                       \
  K(void, gelu_backward, (const Tensor& dinp, const Tensor& dout, const Tensor& inp))                 \
  K(void, silu_forward, (const Tensor& out, const Tensor& inp))                                       \
  K(void, silu_backward, (const Tensor& dinp, const Tensor& dout, const Tensor& inp))                 \
  K(void, swiglu_forward, (const Tensor& out, const Tensor& gate, const Tensor& up))                  \
  K(void, swiglu_backward,                                                                            \
    (const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up))

ZT_ACTIVATION_CUDA_KERNELS(ZT_DECLARE_KERNEL)

}  // namespace zt::cuda
