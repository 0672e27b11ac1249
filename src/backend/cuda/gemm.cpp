// CUDA general matrix product on strided 2-D tensors (backend/gemm_kernels.h): one
// cuBLASLt matmul with the row strides as leading dimensions, alpha, and beta 0 (=) or 1
// (+=), so a LoRA product reads or accumulates into a column window of a packed
// activation with no staging copy. Operands of different dtypes are widened to f32 (needs
// them packed); a 16-bit out of f32 operands is computed into f32 scratch and converted or
// added with one rounding (needs out packed): the LoRA path never takes these, since its
// adapters and activations share the compute dtype.
#include <cuda_runtime.h>

#include "backend/cuda/context.h"
#include "backend/cuda/convert.h"
#include "backend/cuda/matmul.h"
#include "backend/gemm_kernels.h"
#include "core/allocator.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

// The operand as cuBLASLt's row-major MatrixRef in dtype `compute` (widened into `holder`
// when its own dtype differs; only packed operands can be).
MatrixRef matrix_ref(const Tensor& t, Transpose tr, DType compute, Buffer& holder) {
  const int64_t rows = t.size(0), cols = t.size(1), ld = t.strides()[0];
  const void* data = t.data();
  if (t.dtype() != compute) {
    ZT_CHECK(ld == cols || rows <= 1, "gemm: operand '", t.name(), "' is ", dtype_name(t.dtype()), " and strided; ",
             "widening to ", dtype_name(compute), " needs a packed operand");
    data = device_as_dtype(data, t.dtype(), compute, static_cast<size_t>(rows * cols), holder, 16);
  }
  return MatrixRef{data, compute, rows, cols, ld, tr == Transpose::Yes};
}

}  // namespace

void gemm(const Tensor& out, const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, float alpha,
          GradWrite write) {
  const int64_t M = out.size(0), N = out.size(1);
  const DType compute = act_act_compute_dtype(a.dtype(), b.dtype());
  Buffer a_holder, b_holder;
  const MatrixRef ra = matrix_ref(a, ta, compute, a_holder);
  const MatrixRef rb = matrix_ref(b, tb, compute, b_holder);
  const float beta = write == GradWrite::Accumulate ? 1.0f : 0.0f;
  const int64_t out_ld = out.strides()[0];
  if (matmul_output_supported(compute, out.dtype())) {
    matmul(ra, rb, out.data(), out.dtype(), out_ld, alpha, beta);
    return;
  }
  // f32 operands, 16-bit out: f32 scratch, then one rounding.
  ZT_CHECK(out_ld == N || M <= 1, "gemm: a strided ", dtype_name(out.dtype()), " out needs operands of its dtype");
  const size_t n = static_cast<size_t>(M * N);
  Buffer scratch(n * sizeof(float), Device::cuda(context().device));
  matmul(ra, rb, scratch.data(), DType::F32, N, alpha, 0.0f);
  const float* s = static_cast<const float*>(scratch.data());
  if (write == GradWrite::Accumulate) {
    accumulate_f32_into(out.data(), out.dtype(), s, n, compute_stream());
  } else if (out.dtype() == DType::BF16) {
    convert_f32_to_bf16(s, static_cast<bf16*>(out.data()), n, compute_stream());
  } else {
    convert_f32_to_f16(s, static_cast<f16*>(out.data()), n, compute_stream());
  }
}

}  // namespace zt::cuda
