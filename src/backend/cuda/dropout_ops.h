// CUDA inverted dropout (dropout.cu), with the mask of ops/dropout.h: element i is kept
// when Philox(seed, stream).uniform(i) >= p, then scaled by 1/(1-p). The device runs the
// same Philox4x32-10 (core/rng.h), so the mask is bitwise the CPU's for every element.
// Accumulation rule: out / dinp (=); both may alias their input. Tensors are contiguous,
// f32 or bf16 (one dtype per call), already validated by the ops/ wrapper; p == 0 copies.
#pragma once
#include "core/rng.h"
#include "backend/kernel_list.h"
#include "core/tensor.h"

namespace zt::cuda {

#define ZT_DROPOUT_CUDA_KERNELS(K) \
  K(void, dropout_forward, (const Tensor& out, const Tensor& inp, float p, const Philox& rng))        \
  K(void, dropout_backward, (const Tensor& dinp, const Tensor& dout, float p, const Philox& rng))

ZT_DROPOUT_CUDA_KERNELS(ZT_DECLARE_KERNEL)

}  // namespace zt::cuda
