// CPU LayerNorm and RMSNorm (see backend/norm_kernels.h).
//
// Accumulation rule: out, mean, rstd (=); dinp (= or +=, dinp_write); dweight, dbias (+=).
// Forward and dinp are row-parallel (one row per iteration, vectorised over C).
// dweight/dbias: partial column sums over fixed chunks of kRowChunk rows (tasks = row chunk
// x column block, in parallel), then summed over chunks in chunk order per column block and
// added into the gradient once. bf16/f16 weights are staged once per call in f32.
// The parameter-gradient pass runs before the dinp pass, so dinp may alias dout.
#include "backend/norm_kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/elementwise.h"
#include "core/dtype_dispatch.h"

namespace zt::cpu {
namespace {

constexpr int64_t kRowChunk = 128;
constexpr int64_t kColBlock = 128;

template <class W>
const float* staged(const W* p, int64_t n, std::vector<float>& scratch) {
  if constexpr (std::is_same_v<W, float>) {
    (void)n;
    (void)scratch;
    return p;
  } else {
    if (!p) return nullptr;
    scratch.resize(static_cast<size_t>(n));
    convert_to_f32(p, scratch.data(), n);
    return scratch.data();
  }
}

inline bool go_parallel(int64_t N, int64_t C) { return N > 1 && N * C > (1 << 14); }

// Column sums of f(n, c) over all rows, for K outputs at once (dweight, dbias), added into
// grads[k] (G) when grads[k] is non-null. kernel(n, c0, nc, acc[K]) adds row n's
// contributions to columns [c0, c0+nc) into acc[k][0..nc).
template <int K, class G, class Kernel>
void column_sums(G* const grads[K], int64_t N, int64_t C, const Kernel& kernel) {
  const int64_t nrc = (N + kRowChunk - 1) / kRowChunk, ncb = (C + kColBlock - 1) / kColBlock;
  std::vector<float> partial(static_cast<size_t>(K * nrc * C));
#pragma omp parallel for collapse(2) schedule(static) if (go_parallel(N, C))
  for (int64_t rc = 0; rc < nrc; ++rc) {
    for (int64_t cb = 0; cb < ncb; ++cb) {
      const int64_t c0 = cb * kColBlock, nc = std::min(kColBlock, C - c0);
      const int64_t r0 = rc * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
      alignas(64) float acc[K][kColBlock];
      for (int k = 0; k < K; ++k) std::fill(acc[k], acc[k] + nc, 0.0f);
      for (int64_t n = r0; n < r1; ++n) kernel(n, c0, nc, acc);
      for (int k = 0; k < K; ++k)
        std::copy(acc[k], acc[k] + nc, &partial[static_cast<size_t>((k * nrc + rc) * C + c0)]);
    }
  }
#pragma omp parallel for schedule(static) if (go_parallel(N, C))
  for (int64_t cb = 0; cb < ncb; ++cb) {
    const int64_t c0 = cb * kColBlock, nc = std::min(kColBlock, C - c0);
    for (int k = 0; k < K; ++k) {
      if (!grads[k]) continue;
      alignas(64) float acc[kColBlock];
      const float* p0 = &partial[static_cast<size_t>(k * nrc * C + c0)];
      std::copy(p0, p0 + nc, acc);
      for (int64_t rc = 1; rc < nrc; ++rc) {
        const float* p = &partial[static_cast<size_t>((k * nrc + rc) * C + c0)];
#pragma omp simd
        for (int64_t c = 0; c < nc; ++c) acc[c] += p[c];
      }
      accumulate_f32(grads[k] + c0, acc, nc);
    }
  }
}

template <class W>
void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* inp, const W* weight, const W* bias,
                           int64_t N, int64_t C, float eps) {
  std::vector<float> ws, bs;
  const float* w = staged(weight, C, ws);
  const float* b = staged(bias, C, bs);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (go_parallel(N, C))
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    const float m = s * inv_c;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(v * inv_c + eps);
    if (b) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * r * w[c] + b[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * r * w[c];
    }
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = r;
  }
}

template <class W, class G>
void layernorm_backward_f32(float* dinp, G* dweight, G* dbias, const float* dout, const float* inp, const W* weight,
                            const float* mean, const float* rstd, int64_t N, int64_t C, GradWrite dinp_write) {
  if (N == 0 || C == 0) return;
  if (dweight || dbias) {
    G* const grads[2] = {dweight, dbias};
    column_sums<2, G>(grads, N, C, [&](int64_t n, int64_t c0, int64_t nc, float(*acc)[kColBlock]) {
      const float m = mean[n], r = rstd[n];
      const float* x = inp + n * C + c0;
      const float* d = dout + n * C + c0;
      float* aw = acc[0];
      float* ab = acc[1];
#pragma omp simd
      for (int64_t c = 0; c < nc; ++c) {
        aw[c] += d[c] * ((x[c] - m) * r);
        ab[c] += d[c];
      }
    });
  }
  if (!dinp) return;
  std::vector<float> ws;
  const float* w = staged(weight, C, ws);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (go_parallel(N, C))
  for (int64_t n = 0; n < N; ++n) {
    const float m = mean[n], r = rstd[n];
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    float* dx = dinp + n * C;
    float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
    for (int64_t c = 0; c < C; ++c) {
      const float dn = w[c] * d[c];
      s1 += dn;
      s2 += dn * ((x[c] - m) * r);
    }
    const float mean_dn = s1 * inv_c, mean_dn_n = s2 * inv_c;
    if (dinp_write == GradWrite::Accumulate) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dx[c] += (w[c] * d[c] - mean_dn - ((x[c] - m) * r) * mean_dn_n) * r;
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dx[c] = (w[c] * d[c] - mean_dn - ((x[c] - m) * r) * mean_dn_n) * r;
    }
  }
}

template <class W>
void rmsnorm_forward_f32(float* out, float* rstd, const float* inp, const W* weight, int64_t N, int64_t C, float eps) {
  std::vector<float> ws;
  const float* w = staged(weight, C, ws);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (go_parallel(N, C))
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c] * x[c];
    const float r = 1.0f / std::sqrt(s * inv_c + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] * r) * w[c];
    if (rstd) rstd[n] = r;
  }
}

template <class W, class G>
void rmsnorm_backward_f32(float* dinp, G* dweight, const float* dout, const float* inp, const W* weight,
                          const float* rstd, int64_t N, int64_t C, GradWrite dinp_write) {
  if (N == 0 || C == 0) return;
  if (dweight) {
    G* const grads[1] = {dweight};
    column_sums<1, G>(grads, N, C, [&](int64_t n, int64_t c0, int64_t nc, float(*acc)[kColBlock]) {
      const float r = rstd[n];
      const float* x = inp + n * C + c0;
      const float* d = dout + n * C + c0;
      float* aw = acc[0];
#pragma omp simd
      for (int64_t c = 0; c < nc; ++c) aw[c] += d[c] * (x[c] * r);
    });
  }
  if (!dinp) return;
  std::vector<float> ws;
  const float* w = staged(weight, C, ws);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (go_parallel(N, C))
  for (int64_t n = 0; n < N; ++n) {
    const float r = rstd[n];
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    float* dx = dinp + n * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += w[c] * d[c] * (x[c] * r);
    const float mean_dn_n = s * inv_c;
    if (dinp_write == GradWrite::Accumulate) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dx[c] += (w[c] * d[c] - (x[c] * r) * mean_dn_n) * r;
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dx[c] = (w[c] * d[c] - (x[c] * r) * mean_dn_n) * r;
    }
  }
}

}  // namespace

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps) {
  const int64_t C = weight.numel(), N = inp.numel() / (C ? C : 1);
  dispatch_float(weight.dtype(), [&](auto tag) {
    using W = decltype(tag);
    layernorm_forward_f32(out.storage_as<float>(), mean.storage_as<float>(), rstd.storage_as<float>(),
                          inp.storage_as<const float>(), weight.storage_as<const W>(), bias.storage_as<const W>(), N, C,
                          eps);
  });
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                        GradWrite dinp_write) {
  const int64_t C = weight.numel(), N = dout.numel() / (C ? C : 1);
  const DType gdt = dweight.has_data() ? dweight.dtype() : dbias.has_data() ? dbias.dtype() : weight.dtype();
  dispatch_float(weight.dtype(), [&](auto wtag) {
    dispatch_float(gdt, [&](auto gtag) {
      using W = decltype(wtag);
      using G = decltype(gtag);
      layernorm_backward_f32<W, G>(dinp.storage_as<float>(), dweight.storage_as<G>(), dbias.storage_as<G>(),
                                   dout.storage_as<const float>(), inp.storage_as<const float>(),
                                   weight.storage_as<const W>(), mean.storage_as<const float>(),
                                   rstd.storage_as<const float>(), N, C, dinp_write);
    });
  });
}

void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  const int64_t C = weight.numel(), N = inp.numel() / (C ? C : 1);
  dispatch_float(weight.dtype(), [&](auto tag) {
    using W = decltype(tag);
    rmsnorm_forward_f32(out.storage_as<float>(), rstd.storage_as<float>(), inp.storage_as<const float>(),
                        weight.storage_as<const W>(), N, C, eps);
  });
}

void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd, GradWrite dinp_write) {
  const int64_t C = weight.numel(), N = dout.numel() / (C ? C : 1);
  const DType gdt = dweight.has_data() ? dweight.dtype() : weight.dtype();
  dispatch_float(weight.dtype(), [&](auto wtag) {
    dispatch_float(gdt, [&](auto gtag) {
      using W = decltype(wtag);
      using G = decltype(gtag);
      rmsnorm_backward_f32<W, G>(dinp.storage_as<float>(), dweight.storage_as<G>(), dout.storage_as<const float>(),
                                 inp.storage_as<const float>(), weight.storage_as<const W>(),
                                 rstd.storage_as<const float>(), N, C, dinp_write);
    });
  });
}

}  // namespace zt::cpu
