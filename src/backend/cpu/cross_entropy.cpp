// CPU LM head + softmax cross-entropy, chunked over rows so that the [N, V] logits are
// never stored whole.
//
// Accumulation rule: dinp (activation gradient) is overwritten (=); dweight (parameter
// gradient) is accumulated (+=) in the weight's dtype: bf16/f16 go through an f32
// accumulator that is added once at the end. losses (optional) is overwritten.
//
// Schedule ("vocab parallel"): one OpenMP region; thread k owns a slice [v0, v1) of the
// vocabulary for the whole call. For each chunk of rows, thread k computes its logits
// slice with a single-threaded sgemm, its per-row partial max and sum of exponentials;
// after a barrier every row's log-sum-exp is combined from the partials in thread order.
// For the backward, thread k turns its slice into dlogits = grad_scale (softmax - onehot)
// and immediately does dW[v0:v1] += dlogits^T inp_c (rows it owns: no race, fixed order)
// and a partial dinp_k = dlogits W[v0:v1]; the partials are summed in thread order.
// Results are deterministic for a given thread count. The loss sum is accumulated in
// double, in row order. bf16/f16 weights are converted to f32 once per call (each thread
// its own rows).
#include "backend/cross_entropy_kernels.h"

#include <cblas.h>

#include "backend/cpu/fast_math.h"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"

namespace zt::cpu {
namespace {

constexpr int64_t kSumBlock = 512;

// Partial max and sum of exp over one slice of a row; keeps e = exp(z - max) in z.
ZT_VECTOR_MATH void slice_exp(float* z, int64_t n, float* out_max, float* out_sum) {
  float mx = z[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 1; j < n; ++j) mx = z[j] > mx ? z[j] : mx;
  // Blocks of kSumBlock summed in f32 (vectorised), blocks summed in double: accurate for
  // vocabularies of 100k+ columns.
  double sum = 0.0;
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const int64_t b1 = std::min(n, b0 + kSumBlock);
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (int64_t j = b0; j < b1; ++j) {
      const float e = exp_approx(z[j] - mx);
      z[j] = e;
      part += e;
    }
    sum += part;
  }
  *out_max = mx;
  *out_sum = static_cast<float>(sum);
}

ZT_VECTOR_MATH float slice_sum_exp(const float* z, int64_t n, float* out_max) {
  float mx = z[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 1; j < n; ++j) mx = z[j] > mx ? z[j] : mx;
  double sum = 0.0;
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const int64_t b1 = std::min(n, b0 + kSumBlock);
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (int64_t j = b0; j < b1; ++j) part += exp_approx(z[j] - mx);
    sum += part;
  }
  *out_max = mx;
  return static_cast<float>(sum);
}

// One thread's vocabulary slice [v0, v0 + nv) of a chunk of m rows, in the backward: its
// logits Z (holding exp(z - pmax)) become dlogits = grad_scale (exp(z - lse) - onehot),
// then dW_slice += dlogits^T X (when dW) and dpart (=) dlogits W_slice.
void slice_backward(float* Z, int64_t m, int64_t nv, int64_t v0, int64_t C, const int32_t* tg, int ignore_index,
                    float grad_scale, const float* pmax, const float* row_lse, const float* X, const float* W,
                    float* dW, float* dpart) {
  for (int64_t i = 0; i < m; ++i) {
    float* z = Z + i * nv;
    const int32_t t = tg[i];
    if (t == ignore_index) {
      std::memset(z, 0, static_cast<size_t>(nv) * sizeof(float));
      continue;
    }
    const float f = grad_scale * std::exp(pmax[i] - row_lse[i]);
    for (int64_t j = 0; j < nv; ++j) z[j] *= f;
    if (t >= v0 && t < v0 + nv) z[t - v0] -= grad_scale;
  }
  if (nv == 0) {
    std::memset(dpart, 0, static_cast<size_t>(m * C) * sizeof(float));
    return;
  }
  if (dW != nullptr)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(nv), static_cast<int>(C), static_cast<int>(m),
                1.0f, Z, static_cast<int>(nv), X, static_cast<int>(C), 1.0f, dW, static_cast<int>(C));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(C), static_cast<int>(nv),
              1.0f, Z, static_cast<int>(nv), W, static_cast<int>(C), 0.0f, dpart, static_cast<int>(C));
}

// The CPU kernel: logits in chunks of rows; dinp/dweight null for the forward only.
CrossEntropySums lm_head_cross_entropy(const float* inp, const void* weight, DType weight_dtype, const int32_t* targets,
                                       int64_t N, int64_t C, int64_t V, int64_t Vp, int ignore_index, float* losses,
                                       float* dinp, void* dweight, float grad_scale) {
  ZT_CHECK(V > 0 && V <= Vp, "lm_head_cross_entropy: vocab_size ", V, " must be in [1, ", Vp, "]");
  ZT_CHECK(weight_dtype == DType::F32 || weight_dtype == DType::BF16 || weight_dtype == DType::F16,
           "lm_head_cross_entropy: weight must be f32, bf16 or f16");
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets[i];
    if (t != ignore_index && (t < 0 || t >= V))
      ZT_THROW_INPUT("cross-entropy target ", t, " at row ", i, " is outside the vocabulary [0, ", V,
                     ") and is not ignore_index (", ignore_index, "); check the tokenizer/vocab_size");
  }
  CrossEntropySums result;
  if (N == 0) return result;
  const bool backward = dinp != nullptr;
  // A frozen head (LoRA) has no weight gradient: dinp only.
  const bool weight_grad = backward && dweight != nullptr;
  const bool f32_weight = weight_dtype == DType::F32;

  // Vocabulary slices: at least 128 columns each, at most one per thread.
  const int max_threads = std::max(1, omp_get_max_threads());
  const int64_t want_slices = std::clamp<int64_t>(V / 128, 1, max_threads);
  // Rows per chunk: up to 256, keeping the chunk's logits to about 64 MiB.
  const int64_t R = std::clamp<int64_t>((int64_t{16} << 20) / V, 16, 256);
  const int64_t rows_max = std::min(R, N);

  std::unique_ptr<float[]> w_conv(f32_weight ? nullptr : new float[static_cast<size_t>(V * C)]);
  std::unique_ptr<float[]> dw_acc(weight_grad && !f32_weight ? new float[static_cast<size_t>(V * C)] : nullptr);
  const float* W = f32_weight ? static_cast<const float*>(weight) : w_conv.get();
  float* dW = weight_grad ? (f32_weight ? static_cast<float*>(dweight) : dw_acc.get()) : nullptr;

  std::vector<float> row_losses(static_cast<size_t>(N), 0.0f);
  // Per slice, per chunk row: partial max and sum. Per row: target logit, lse.
  std::vector<float> part_max(static_cast<size_t>(want_slices * rows_max));
  std::vector<float> part_sum(static_cast<size_t>(want_slices * rows_max));
  std::vector<float> target_logit(static_cast<size_t>(rows_max));
  std::vector<float> row_lse(static_cast<size_t>(rows_max));
  std::unique_ptr<float[]> dinp_part(backward ? new float[static_cast<size_t>(want_slices * rows_max * C)] : nullptr);

  BlasSingleThread single;
#pragma omp parallel num_threads(static_cast <int>(want_slices))
  {
    const int64_t nt = omp_get_num_threads();
    const int64_t k = omp_get_thread_num();
    // Slice k: [v0, v1), boundaries on multiples of 16 columns.
    auto bound = [&](int64_t s) { return s == nt ? V : std::min(V, (V * s / nt) / 16 * 16); };
    const int64_t v0 = bound(k), v1 = bound(k + 1), nv = v1 - v0;
    std::vector<float> Z(static_cast<size_t>(rows_max * std::max<int64_t>(nv, 1)));

    if (!f32_weight && nv > 0)
      convert(static_cast<const char*>(weight) + v0 * C * static_cast<int64_t>(dtype_size(weight_dtype)), weight_dtype,
              w_conv.get() + v0 * C, DType::F32, static_cast<size_t>(nv * C));
    if (weight_grad && !f32_weight && nv > 0) std::memset(dW + v0 * C, 0, static_cast<size_t>(nv * C) * sizeof(float));
#pragma omp barrier

    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t m = std::min(R, N - r0);
      const float* X = inp + r0 * C;
      const int32_t* tg = targets + r0;
      float* pmax = part_max.data() + k * rows_max;
      float* psum = part_sum.data() + k * rows_max;
      if (nv > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(nv),
                    static_cast<int>(C), 1.0f, X, static_cast<int>(C), W + v0 * C, static_cast<int>(C), 0.0f, Z.data(),
                    static_cast<int>(nv));
      }
      for (int64_t i = 0; i < m; ++i) {
        float* z = Z.data() + i * nv;
        const int32_t t = tg[i];
        if (t == ignore_index || nv == 0) {
          pmax[i] = -INFINITY;
          psum[i] = 0.0f;
          continue;
        }
        if (t >= v0 && t < v1) target_logit[static_cast<size_t>(i)] = z[t - v0];
        if (backward) {
          slice_exp(z, nv, &pmax[i], &psum[i]);
        } else {
          psum[i] = slice_sum_exp(z, nv, &pmax[i]);
        }
      }
#pragma omp barrier
      // Combine the partials in slice order (every thread the same way) for its share of rows.
#pragma omp for schedule(static)
      for (int64_t i = 0; i < m; ++i) {
        if (tg[i] == ignore_index) continue;
        float mx = -INFINITY;
        for (int64_t s = 0; s < nt; ++s) mx = std::max(mx, part_max[static_cast<size_t>(s * rows_max + i)]);
        float sum = 0.0f;
        for (int64_t s = 0; s < nt; ++s) {
          const float pm = part_max[static_cast<size_t>(s * rows_max + i)];
          if (pm != -INFINITY)  // empty slice (a NaN still propagates)
            sum += part_sum[static_cast<size_t>(s * rows_max + i)] * std::exp(pm - mx);
        }
        const float lse = mx + std::log(sum);
        row_lse[static_cast<size_t>(i)] = lse;
        row_losses[static_cast<size_t>(r0 + i)] = lse - target_logit[static_cast<size_t>(i)];
      }  // implicit barrier
      if (!backward) continue;

      slice_backward(Z.data(), m, nv, v0, C, tg, ignore_index, grad_scale, pmax, row_lse.data(), X, W + v0 * C,
                     weight_grad ? dW + v0 * C : nullptr, dinp_part.get() + k * rows_max * C);
#pragma omp barrier
      // dinp rows of this chunk = sum of the partials in slice order.
#pragma omp for schedule(static)
      for (int64_t e = 0; e < m * C; ++e) {
        float acc = dinp_part[static_cast<size_t>(e)];
        for (int64_t s = 1; s < nt; ++s) acc += dinp_part[static_cast<size_t>(s * rows_max * C + e)];
        dinp[r0 * C + e] = acc;
      }  // implicit barrier: partials and Z are free again
    }

    if (weight_grad && !f32_weight && nv > 0) {
      const float* acc = dW + v0 * C;
      dispatch_float(weight_dtype, [&](auto tag) {
        using T = decltype(tag);
        T* g = static_cast<T*>(dweight) + v0 * C;
        for (int64_t e = 0; e < nv * C; ++e) g[e] = store_as<T>(load_f32(g[e]) + acc[e]);
      });
    }
  }

  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] == ignore_index) continue;
    result.loss_sum += static_cast<double>(row_losses[static_cast<size_t>(i)]);
    ++result.count;
  }
  if (losses != nullptr) std::memcpy(losses, row_losses.data(), static_cast<size_t>(N) * sizeof(float));
  return result;
}

}  // namespace

CrossEntropySums lm_head_cross_entropy_forward(const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                               int64_t vocab_size, int ignore_index, const Tensor& losses,
                                               int64_t /*chunk_rows: the CPU chunks on its own*/) {
  const bool has_losses = losses.defined() && losses.data() != nullptr;
  return lm_head_cross_entropy(inp.data_as<float>(), weight.data(), weight.dtype(), targets.data_as<int32_t>(),
                               inp.size(0), inp.size(1), vocab_size, weight.size(0), ignore_index,
                               has_losses ? losses.data_as<float>() : nullptr, nullptr, nullptr, 0.0f);
}

CrossEntropySums lm_head_cross_entropy_forward_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& inp,
                                                        const Tensor& weight, const Tensor& targets, int64_t vocab_size,
                                                        int ignore_index, float grad_scale, int64_t /*chunk_rows*/) {
  return lm_head_cross_entropy(inp.data_as<float>(), weight.data(), weight.dtype(), targets.data_as<int32_t>(),
                               inp.size(0), inp.size(1), vocab_size, weight.size(0), ignore_index, nullptr,
                               dinp.data_as<float>(), dweight.has_data() ? dweight.data() : nullptr, grad_scale);
}

}  // namespace zt::cpu
