// General matrix product on (possibly strided) 2-D tensors:
//
//   out [M, N] (=, or += with GradWrite::Accumulate) alpha * op(a) [M, K] @ op(b) [K, N]
//
// op(x) is x or x^T (Transpose). Every tensor is 2-D with unit column stride and a row
// stride of at least its column count: a packed matrix or a column window of a wider one
// (t.narrow(1, first, count)), so a product can read or write a few columns of a packed
// activation in place. out must not overlap a or b. Any floating dtypes on the CPU (f32
// arithmetic); on CUDA the kernels' rules (backend/gemm_kernels.h). Used by the LoRA
// adapters (model/lora.cpp), whose products are too small and too oddly shaped for
// linear_forward/backward's contract.
#pragma once
#include "backend/gemm_kernels.h"
#include "core/grad_write.h"
#include "core/tensor.h"

namespace zt::ops {

void gemm(const Tensor& out, const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, float alpha = 1.0f,
          GradWrite write = GradWrite::Overwrite);

}  // namespace zt::ops
