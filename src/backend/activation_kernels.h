// The activation kernels of both backends (ops/activation.h has the contract): GELU (tanh
// form), SiLU and SwiGLU, forward and backward; backend/cpu/activation.cpp (f32) and
// backend/cuda/activation.cu (f32, bf16, f16; all tensors of one call share the dtype; the
// arithmetic is f32). The ops/ functions have validated the tensors. Outputs may alias
// inputs element for element (out == inp, dinp == dout, ...). gelu/silu take contiguous
// tensors; swiglu takes [..., F] views whose rows may be strided
// (e.g. the two column halves of a fused [N, 2F] gate/up buffer).
#pragma once
#include "backend/kernel_list.h"
#include "core/tensor.h"

#define ZT_ACTIVATION_KERNELS(K)                                                      \
  K(void, gelu_forward, (const Tensor& out, const Tensor& inp))                       \
  K(void, gelu_backward, (const Tensor& dinp, const Tensor& dout, const Tensor& inp)) \
  K(void, silu_forward, (const Tensor& out, const Tensor& inp))                       \
  K(void, silu_backward, (const Tensor& dinp, const Tensor& dout, const Tensor& inp)) \
  K(void, swiglu_forward, (const Tensor& out, const Tensor& gate, const Tensor& up))  \
  K(void, swiglu_backward,                                                            \
    (const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up))

namespace zt::cpu {
ZT_ACTIVATION_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_ACTIVATION_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
