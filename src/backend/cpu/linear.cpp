// CPU linear layer: sgemm on f32 (see backend/linear_kernels.h).
//
// Accumulation rule: out (=), dinp (=), dweight (+=), dbias (+=).
// f32 weights feed sgemm directly; f32 dweight accumulates with beta = 1 in sgemm.
// bf16/f16 weights are converted into a thread-local f32 scratch (kept between calls),
// bf16/f16 dweight is computed into another f32 scratch and added with one rounding.
// dbias sums columns over all rows in f32 (column blocks in parallel; the row order is
// fixed, so results do not depend on the thread count).
#include "backend/linear_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/elementwise.h"
#include "core/dtype_dispatch.h"

namespace zt::cpu {
namespace {

// f32 view of a parameter: the pointer itself for f32, else a converted copy in `scratch`.
template <class W>
const float* as_f32(const W* p, int64_t n, std::vector<float>& scratch) {
  if constexpr (std::is_same_v<W, float>) {
    (void)n;
    (void)scratch;
    return p;
  } else {
    if (scratch.size() < static_cast<size_t>(n)) scratch.resize(static_cast<size_t>(n));
    convert_to_f32(p, scratch.data(), n);
    return scratch.data();
  }
}

std::vector<float>& weight_scratch() {
  thread_local std::vector<float> s;
  return s;
}
std::vector<float>& grad_scratch() {
  thread_local std::vector<float> s;
  return s;
}

inline int blas_int(int64_t v) { return static_cast<int>(v); }

// out[N, O] = inp[N, I] @ weight[O, I]^T (+ bias[O]); bias may be null. With
// WeightLayout::InOut the weight is [I, O] and out = inp @ weight.
template <class W>
void linear_forward_f32(float* out, const float* inp, const W* weight, const W* bias, int64_t N, int64_t I, int64_t O,
                        WeightLayout layout) {
  const bool in_out = layout == WeightLayout::InOut;
  if (N == 0 || O == 0) return;
  float beta = 0.0f;
  if (bias) {
    std::vector<float> bias_scratch;
    const float* b = as_f32(bias, O, bias_scratch);
#pragma omp parallel for schedule(static) if (N * O > (1 << 16))
    for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * O, b, static_cast<size_t>(O) * sizeof(float));
    beta = 1.0f;
  }
  if (I == 0) {
    if (!bias) std::memset(out, 0, static_cast<size_t>(N * O) * sizeof(float));
    return;
  }
  const float* w = as_f32(weight, O * I, weight_scratch());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, in_out ? CblasNoTrans : CblasTrans, blas_int(N), blas_int(O), blas_int(I),
              1.0f, inp, blas_int(I), w, in_out ? blas_int(O) : blas_int(I), beta, out, blas_int(O));
}

// dinp[N, I] = dout @ weight (null: skipped); dweight[O, I] += dout^T @ inp (null: skipped);
// dbias[O] += column sums of dout (null: skipped). InOut: dinp = dout @ weight^T and
// dweight[I, O] += inp^T @ dout. W is the weight's storage type, G the gradient's.
template <class W, class G>
void linear_backward_f32(float* dinp, G* dweight, G* dbias, const float* dout, const float* inp, const W* weight,
                         int64_t N, int64_t I, int64_t O, WeightLayout layout) {
  const bool in_out = layout == WeightLayout::InOut;
  if (dinp && N > 0 && I > 0) {
    if (O == 0) {
      std::memset(dinp, 0, static_cast<size_t>(N * I) * sizeof(float));
    } else {
      const float* w = as_f32(weight, O * I, weight_scratch());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, in_out ? CblasTrans : CblasNoTrans, blas_int(N), blas_int(I),
                  blas_int(O), 1.0f, dout, blas_int(O), w, in_out ? blas_int(O) : blas_int(I), 0.0f, dinp, blas_int(I));
    }
  }
  if (dweight && N > 0 && O > 0 && I > 0) {
    // OutIn: dW[O, I] += dout^T @ inp; InOut: dW[I, O] += inp^T @ dout.
    const float* a = in_out ? inp : dout;
    const float* b = in_out ? dout : inp;
    const int64_t rows = in_out ? I : O, cols = in_out ? O : I;
    if constexpr (std::is_same_v<G, float>) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(rows), blas_int(cols), blas_int(N), 1.0f, a,
                  blas_int(rows), b, blas_int(cols), 1.0f, dweight, blas_int(cols));
    } else {
      std::vector<float>& s = grad_scratch();
      if (s.size() < static_cast<size_t>(O * I)) s.resize(static_cast<size_t>(O * I));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(rows), blas_int(cols), blas_int(N), 1.0f, a,
                  blas_int(rows), b, blas_int(cols), 0.0f, s.data(), blas_int(cols));
      accumulate_f32(dweight, s.data(), O * I);
    }
  }
  if (dbias && N > 0 && O > 0) {
    constexpr int64_t kCols = 256;
    const int64_t nblocks = (O + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (N * O > (1 << 15))
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t c0 = blk * kCols, nc = std::min(kCols, O - c0);
      alignas(64) float acc[kCols];
      std::fill(acc, acc + nc, 0.0f);
      for (int64_t n = 0; n < N; ++n) {
        const float* row = dout + n * O + c0;
#pragma omp simd
        for (int64_t c = 0; c < nc; ++c) acc[c] += row[c];
      }
      accumulate_f32(dbias + c0, acc, nc);
    }
  }
}

}  // namespace

void linear_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    WeightLayout layout) {
  const bool in_out = layout == WeightLayout::InOut;
  const int64_t O = weight.size(in_out ? 1 : 0), I = weight.size(in_out ? 0 : 1);
  const int64_t N = inp.numel() / (I ? I : 1);
  const bool has_bias = bias.defined() && bias.data() != nullptr;
  dispatch_float(weight.dtype(), [&](auto tag) {
    using W = decltype(tag);
    linear_forward_f32(static_cast<float*>(out.data()), static_cast<const float*>(inp.data()),
                       static_cast<const W*>(weight.data()), has_bias ? static_cast<const W*>(bias.data()) : nullptr, N,
                       I, O, layout);
  });
}

void linear_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, WeightLayout layout) {
  const bool in_out = layout == WeightLayout::InOut;
  const int64_t O = weight.size(in_out ? 1 : 0), I = weight.size(in_out ? 0 : 1);
  const int64_t N = dout.numel() / (O ? O : 1);
  const bool has_dinp = dinp.defined() && dinp.data() != nullptr;
  const bool has_dw = dweight.defined() && dweight.data() != nullptr;
  const bool has_db = dbias.defined() && dbias.data() != nullptr;
  const DType gdt = has_dw ? dweight.dtype() : (has_db ? dbias.dtype() : weight.dtype());
  dispatch_float(weight.dtype(), [&](auto wtag) {
    dispatch_float(gdt, [&](auto gtag) {
      using W = decltype(wtag);
      using G = decltype(gtag);
      linear_backward_f32<W, G>(
          has_dinp ? static_cast<float*>(dinp.data()) : nullptr, has_dw ? static_cast<G*>(dweight.data()) : nullptr,
          has_db ? static_cast<G*>(dbias.data()) : nullptr, static_cast<const float*>(dout.data()),
          has_dw ? static_cast<const float*>(inp.data()) : nullptr, static_cast<const W*>(weight.data()), N, I, O,
          layout);
    });
  });
}

}  // namespace zt::cpu
