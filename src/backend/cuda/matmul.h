// Row-major matrix products on cuBLASLt (matmul.cpp) and the few element-wise kernels that
// the linear layer and the fused LM head share (linear.cu). Internal to backend/cuda.
//
// Everything runs on the compute stream; scratch comes from the caching allocator.
//
// Row-major <-> cuBLASLt column-major. cuBLASLt is column-major: a row-major matrix X
// stored [r, c] with leading dimension ld is, in the same memory, the column-major matrix
// X^T ([c, r], same ld). The row-major product D = op(A) op(B) ([M, N] = [M, K] [K, N]) is
// therefore the column-major product D^T = op(B)^T op(A)^T, and op(B)^T over B's memory
// (column-major B^T) is "B's memory with B's own transpose flag". So matmul() hands
// cuBLASLt: its A = our B (same transpose flag), its B = our A (same flag), m = N, n = M,
// k = K, and every layout is (rows = stored columns, cols = stored rows, ld). A bias of
// length N (one per output column of the row-major D) is, for cuBLASLt, one per row of
// its D: exactly what CUBLASLT_EPILOGUE_BIAS broadcasts.
//
// Precision: CUBLAS_COMPUTE_32F with f32 scale (alpha, beta) for every product. For f32
// inputs this is the exact-f32 path (no TF32: that would be CUBLAS_COMPUTE_32F_FAST_TF32),
// so f32 results agree with the CPU backend's sgemm to summation order (about 1e-6).
// Supported (A/B type -> D type): f32 -> f32; bf16 -> bf16 or f32; f16 -> f16 or f32.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/dtype.h"

namespace zt::cuda {

// A row-major matrix in device memory: `rows` x `cols` as stored, row stride `ld` elements
// (0: packed, ld = cols), used as its transpose when `trans`.
struct MatrixRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t ld = 0;
  bool trans = false;

  int64_t op_rows() const { return trans ? cols : rows; }
  int64_t op_cols() const { return trans ? rows : cols; }
  int64_t stride() const { return ld ? ld : cols; }
};

// Whether cuBLASLt writes D of type d for inputs of type ab (see the table above).
bool matmul_output_supported(DType ab, DType d);

// The one dtype both operands of an activation x weight product are brought to: the
// common dtype when they agree; the weight's dtype for f32 activations (the activation is
// rounded to bf16/f16: mixed precision); otherwise f32 (exact widening of both).
DType act_weight_compute_dtype(DType act, DType weight);
// For a product of two activations (weight gradients): their dtype when they agree, else f32.
DType act_act_compute_dtype(DType a, DType b);

// n elements at src (device) as dtype `to`: src itself when the dtype already matches and
// src is aligned to min_align bytes, else a converted (or copied) version in `holder`
// (from the caching allocator: 256-byte aligned).
const void* device_as_dtype(const void* src, DType from, DType to, size_t n, Buffer& holder, size_t min_align = 1);

// D [M, N] (row stride d_ld, 0: packed) = alpha op(A) op(B) + beta D (+ bias).
// A and B share one dtype; D's dtype must be supported for it (matmul_output_supported).
// bias: [N] of d_dtype, 16-byte aligned, added to every row; only with beta == 0. It is
// fused as CUBLASLT_EPILOGUE_BIAS; when cuBLASLt has no algorithm with that epilogue for
// the problem, D is filled with the broadcast bias and the product added with beta = 1.
// K == 0 gives D = beta D (+ bias). M == 0 or N == 0 does nothing.
void matmul(const MatrixRef& a, const MatrixRef& b, void* d, DType d_dtype, int64_t d_ld, float alpha, float beta,
            const void* bias = nullptr);

// out [M, N] (=, or += when accumulate) op(A) op(B) (+ bias[N], only for =), out of any
// floating dtype, packed or with row stride out_ld. Where cuBLASLt cannot write out's dtype
// for the inputs' dtype, the product goes to f32 scratch and is then converted (=) or added
// with one rounding (+=). Otherwise it is one matmul, with beta = 1 for +=. bias may have
// any floating dtype (converted to the output type when needed).
void matmul_into(const MatrixRef& a, const MatrixRef& b, void* out, DType out_dtype, int64_t out_ld, bool accumulate,
                 const void* bias = nullptr, DType bias_dtype = DType::F32);

// ---- element-wise kernels (linear.cu) ----

// dst[i] = dst[i] + src[i] for dst f32/bf16/f16 (f32 add, one rounding: core/dtype.h's).
void accumulate_f32_into(void* dst, DType dst_dtype, const float* src, size_t n, cudaStream_t stream);
// Every row of d [rows, cols] (row stride ld) = bias [cols]; d and bias of one dtype (f32/bf16/f16).
void broadcast_rows(void* d, DType dtype, const void* bias, int64_t rows, int64_t cols, int64_t ld,
                    cudaStream_t stream);
// dbias[c] += sum over r of x[r, c], x [rows, cols] packed (f32/bf16/f16), dbias f32/bf16/f16;
// summed in f32 in a fixed order (deterministic), one rounding into dbias.
void column_sums_into(void* dbias, DType dbias_dtype, const void* x, DType x_dtype, int64_t rows, int64_t cols,
                      cudaStream_t stream);

}  // namespace zt::cuda
