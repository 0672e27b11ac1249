// CPU general matrix product on strided 2-D tensors (backend/gemm_kernels.h): OpenBLAS
// sgemm with each row stride as the leading dimension. 16-bit operands are widened row by
// row into packed f32 scratch; a 16-bit out is computed in f32 scratch (starting from its
// widened value for +=) and rounded once per element, as linear_backward's 16-bit dweight.
#include "backend/gemm_kernels.h"

#include <cblas.h>

#include <type_traits>
#include <vector>

#include "backend/cpu/elementwise.h"
#include "core/dtype_dispatch.h"

namespace zt::cpu {
namespace {

// An f32 view of a matrix operand: its own memory (f32) or widened rows in `scratch`.
struct F32Matrix {
  const float* data = nullptr;
  int64_t ld = 0;
};

F32Matrix widened(const Tensor& t, std::vector<float>& scratch) {
  const int64_t rows = t.size(0), cols = t.size(1), ld = t.strides()[0];
  if (t.dtype() == DType::F32) return {static_cast<const float*>(t.data()), ld};
  scratch.resize(static_cast<size_t>(rows * cols));
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.data());
    for (int64_t r = 0; r < rows; ++r) convert_to_f32(p + r * ld, scratch.data() + r * cols, cols);
  });
  return {scratch.data(), cols};
}

CBLAS_TRANSPOSE blas_transpose(Transpose t) { return t == Transpose::Yes ? CblasTrans : CblasNoTrans; }

}  // namespace

void gemm(const Tensor& out, const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, float alpha,
          GradWrite write) {
  const int64_t M = out.size(0), N = out.size(1);
  const int64_t K = ta == Transpose::Yes ? a.size(0) : a.size(1);
  const bool accumulate = write == GradWrite::Accumulate;
  std::vector<float> a_scratch, b_scratch, out_scratch;
  const F32Matrix fa = widened(a, a_scratch), fb = widened(b, b_scratch);
  const int64_t out_ld = out.strides()[0];
  float* c = nullptr;
  int64_t ldc = 0;
  if (out.dtype() == DType::F32) {
    c = static_cast<float*>(out.data());
    ldc = out_ld;
  } else {
    // += starts from out's widened rows; = from zeros (K = 0 leaves them).
    if (accumulate) {
      widened(out, out_scratch);
    } else {
      out_scratch.assign(static_cast<size_t>(M * N), 0.0f);
    }
    c = out_scratch.data();
    ldc = N;
  }
  if (K == 0) {
    if (!accumulate && out.dtype() == DType::F32)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < N; ++j) c[r * ldc + j] = 0.0f;
  } else {
    cblas_sgemm(CblasRowMajor, blas_transpose(ta), blas_transpose(tb), static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), alpha, fa.data, static_cast<int>(fa.ld), fb.data, static_cast<int>(fb.ld),
                accumulate ? 1.0f : 0.0f, c, static_cast<int>(ldc));
  }
  if (out.dtype() == DType::F32) return;
  // Round the f32 result into the 16-bit rows (one rounding per element).
  dispatch_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      T* o = static_cast<T*>(out.data());
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < N; ++j) {
          const float v = out_scratch[static_cast<size_t>(r * N + j)];
          if constexpr (std::is_same_v<T, bf16>) {
            o[r * out_ld + j] = to_bf16(v);
          } else {
            o[r * out_ld + j] = to_f16(v);
          }
        }
    }
  });
}

}  // namespace zt::cpu
