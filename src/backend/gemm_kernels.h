// General matrix product of both backends (ops/gemm.h validated the tensors):
//   out [M, N] (=, or += with GradWrite::Accumulate) alpha op(a) [M, K] op(b) [K, N]
// on 2-D tensors whose rows may be strided: a column window of a wider row-major matrix
// (narrow(1, ...)), such as one of q/k/v's columns inside the packed [N, q + k + v]
// activation. LoRA's small products (model/lora.cpp) read and write such windows in place
// instead of staging full-width copies.
//
// CPU (backend/cpu/gemm.cpp): OpenBLAS sgemm with the row strides as leading dimensions;
// 16-bit operands are widened into f32 scratch, a 16-bit out is computed in f32 scratch
// (with its old value for +=) and rounded once.
// CUDA (backend/cuda/gemm.cpp): one cuBLASLt matmul (backend/cuda/matmul.h) with alpha and
// beta = 0 / 1 and the strides as leading dimensions, in the operands' common dtype (f32
// when they differ: a 16-bit operand is widened, which needs it packed); a 16-bit out of
// f32 operands goes through f32 scratch (then out must be packed).
#pragma once
#include <cstdint>

#include "backend/kernel_list.h"
#include "core/grad_write.h"
#include "core/tensor.h"

namespace zt {
// Whether a gemm operand is used as stored or transposed.
enum class Transpose : uint8_t { No, Yes };
}  // namespace zt

#define ZT_GEMM_KERNELS(K) \
  K(void, gemm,            \
    (const Tensor& out, const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, float alpha, GradWrite write))

namespace zt::cpu {
ZT_GEMM_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_GEMM_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
