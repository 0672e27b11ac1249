// Linear-layer kernels of both backends. Same meaning, shapes and accumulation rule as
// ops/linear.h, whose wrappers have validated the tensors: out (=), dinp (=), dweight (+=),
// dbias (+=); undefined tensors are skipped.
//
// CPU (backend/cpu/linear.cpp, OpenBLAS sgemm): activations f32; 16-bit weights converted to
// an f32 scratch, 16-bit gradients computed in f32 and added with one rounding.
//
// CUDA (linear.cu, cuBLASLt through backend/cuda/matmul.h). Dtypes: activations (inp, out, dout, dinp) are f32 or bf16, each independently; weight
// and bias f32, bf16 or f16; dweight and dbias any one floating dtype. The arithmetic is
// f32 (CUBLAS_COMPUTE_32F, never TF32). An activation x weight product runs in the weight's
// dtype when the activation is f32 and the weight 16-bit (the activation is rounded to
// bf16/f16 in scratch first: mixed precision), in the common dtype when they agree, else in
// f32 (exact widening). dweight = dout^T inp runs in the activations' dtype (f32 if they
// differ) and is accumulated with one rounding: in place (beta = 1) when cuBLASLt writes
// dweight's dtype, else through f32 scratch. dbias is a deterministic column-sum kernel.
#pragma once
#include "backend/weight_layout.h"
#include "backend/kernel_list.h"
#include "core/tensor.h"

// CUDA: the bias is fused as a cuBLASLt epilogue.
#define ZT_LINEAR_KERNELS(K)                                                                                \
  K(void, linear_forward,                                                                                   \
    (const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, WeightLayout layout))  \
  K(void, linear_backward,                                                                                  \
    (const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp, \
     const Tensor& weight, WeightLayout layout))

namespace zt::cpu {
ZT_LINEAR_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_LINEAR_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
