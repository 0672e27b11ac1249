// LayerNorm and RMSNorm kernels of both backends, behind ops/norm.h: backend/cpu/norm.cpp
// (f32 activations) and backend/cuda/norm.cu. No CUDA types here.
//
// Same meaning, shapes and accumulation rule as the ops:: functions of the same name:
// out, mean, rstd (=); dinp (= or +=, dinp_write); dweight, dbias (+=). The wrapper has checked shapes and
// devices. Activations (inp, out, dout, dinp) are contiguous f32 (CUDA: or bf16/f16), one
// dtype per call; weight/bias are f32, bf16 or f16; dweight/dbias f32, bf16 or f16 (one dtype);
// mean/rstd f32. Undefined (or null) optional tensors are skipped. All math is in f32.
// CUDA: asynchronous on the compute stream. dinp may alias dout (the parameter-gradient pass
// runs first, and each dinp element is written after its row was read) when dinp_write is
// Overwrite; not when Accumulate.
#pragma once
#include "core/grad_write.h"
#include "backend/kernel_list.h"
#include "core/tensor.h"

#define ZT_NORM_KERNELS(K)                                                                                   \
  K(void, layernorm_forward,                                                                                 \
    (const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,     \
     const Tensor& bias, float eps))                                                                         \
  K(void, layernorm_backward,                                                                                \
    (const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp,  \
     const Tensor& weight, const Tensor& mean, const Tensor& rstd, GradWrite dinp_write))                    \
  K(void, rmsnorm_forward,                                                                                   \
    (const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps))             \
  K(void, rmsnorm_backward,                                                                                  \
    (const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight, \
     const Tensor& rstd, GradWrite dinp_write))

// CUDA only (the CPU composes ops::add and the norm): add_*_forward: res = a + b, then the
// norm of res, in one kernel; a, b, res one dtype; res may alias a or b; out may not alias
// any of them.
#define ZT_NORM_CUDA_ONLY_KERNELS(K)                                                                                   \
  K(void, add_layernorm_forward,                                                                                       \
    (const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& a, const Tensor& b,   \
     const Tensor& weight, const Tensor& bias, float eps))                                                             \
  K(void, add_rmsnorm_forward,                                                                                         \
    (const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& weight, \
     float eps))

namespace zt::cpu {
ZT_NORM_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_NORM_KERNELS(ZT_DECLARE_KERNEL)
ZT_NORM_CUDA_ONLY_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
