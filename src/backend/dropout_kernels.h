// The inverted-dropout kernels of both backends (backend/cpu/dropout.cpp, f32;
// backend/cuda/dropout.cu, f32/bf16/f16), with the mask of ops/dropout.h: element i is kept
// when Philox(seed, stream).uniform(i) >= p, then scaled by 1/(1-p). The device runs the
// same Philox4x32-10 (core/rng.h), so its mask is bitwise the CPU's for every element; the
// CPU's mask depends only on (seed, stream, i), never on the thread count.
// Accumulation rule: out / dinp (=); both may alias their input. Tensors are contiguous,
// f32 or bf16 (one dtype per call), already validated by the ops/ wrapper; p == 0 copies.
#pragma once
#include "core/rng.h"
#include "backend/kernel_list.h"
#include "core/tensor.h"

#define ZT_DROPOUT_KERNELS(K)                                                                  \
  K(void, dropout_forward, (const Tensor& out, const Tensor& inp, float p, const Philox& rng)) \
  K(void, dropout_backward, (const Tensor& dinp, const Tensor& dout, float p, const Philox& rng))

namespace zt::cpu {
ZT_DROPOUT_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_DROPOUT_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
