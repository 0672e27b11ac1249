// CPU causal self-attention (GQA) on packed qkv, flash-attention style bookkeeping:
// forward keeps only out and the row log-sum-exp; backward recomputes P = exp(S - lse).
//
// Accumulation rule: forward overwrites out and lse (=); backward overwrites dqkv (=).
// There are no parameters.
//
// Work is split into blocks of kBlock query rows; a block only multiplies against the keys
// it can see (0 .. last row of the block), so the causal half is mostly skipped. The
// matrix products are single-threaded cblas_sgemm calls inside an OpenMP loop over
// (batch, head[, block]); OpenBLAS's own threads are switched off for the duration of the
// loop (its threaded sgemm serialises concurrent callers in a pthreads build).
//
// Packed samples (segment_starts): row t sees keys seg[t] .. t. A block's keys start at its
// first row's sample start (the smallest of the block: starts never decrease), so keys of
// earlier samples are skipped as a whole, and the rest is masked per row. Without segments
// the key range starts at 0 and the code is the plain causal one.
#include "backend/attention_kernels.h"

#include <cblas.h>

#include "backend/cpu/fast_math.h"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace zt::cpu {
namespace {

constexpr int64_t kBlock = 64;

struct Dims {
  int64_t B, T, Hq, Hkv, D;
  int64_t qkv_ld() const { return (Hq + 2 * Hkv) * D; }
  int64_t out_ld() const { return Hq * D; }
  int64_t group() const { return Hq / Hkv; }
  int64_t n_blocks() const { return (T + kBlock - 1) / kBlock; }
};

// The sample start of row t of batch b (0 without segments).
int64_t row_start(const int32_t* seg, const Dims& d, int64_t b, int64_t t) { return seg ? seg[b * d.T + t] : 0; }

// One query block [r0, r1) of query head h of batch b. S: scratch of kBlock * T floats.
ZT_VECTOR_MATH void forward_block(float* out, float* lse, const float* qkv, const int32_t* seg, const Dims& d,
                                  float scale, int64_t b, int64_t h, int64_t blk, float* S) {
  const int64_t ld = d.qkv_ld();
  const int64_t r0 = blk * kBlock;
  const int64_t r1 = std::min(d.T, r0 + kBlock);
  const int64_t m = r1 - r0;
  const int64_t k0 = row_start(seg, d, b, r0);  // keys k0 .. r1-1: the block's first row sees the most
  const int64_t n = r1 - k0;
  const int64_t g = h / d.group();
  const float* base = qkv + b * d.T * ld;
  const float* Q = base + r0 * ld + h * d.D;
  const float* K = base + k0 * ld + (d.Hq + g) * d.D;
  const float* V = base + k0 * ld + (d.Hq + d.Hkv + g) * d.D;
  float* O = out + (b * d.T + r0) * d.out_ld() + h * d.D;
  float* L = lse + (b * d.Hq + h) * d.T + r0;

  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(d.D),
              scale, Q, static_cast<int>(ld), K, static_cast<int>(ld), 0.0f, S, static_cast<int>(n));
  float inv_sum[kBlock];
  for (int64_t i = 0; i < m; ++i) {
    float* s = S + i * n;
    const int64_t lo = row_start(seg, d, b, r0 + i) - k0;  // keys [lo, valid) of the block
    const int64_t valid = r0 + i + 1 - k0;
    float mx = s[lo];
#pragma omp simd reduction(max : mx)
    for (int64_t j = lo + 1; j < valid; ++j) mx = s[j] > mx ? s[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = lo; j < valid; ++j) {
      const float e = exp_approx(s[j] - mx);
      s[j] = e;
      sum += e;
    }
    for (int64_t j = 0; j < lo; ++j) s[j] = 0.0f;
    for (int64_t j = valid; j < n; ++j) s[j] = 0.0f;
    L[i] = mx + std::log(sum);
    inv_sum[i] = 1.0f / sum;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(d.D),
              static_cast<int>(n), 1.0f, S, static_cast<int>(n), V, static_cast<int>(ld), 0.0f, O,
              static_cast<int>(d.out_ld()));
  for (int64_t i = 0; i < m; ++i) {
    const float inv = inv_sum[i];
    float* o = O + i * d.out_ld();
    for (int64_t k = 0; k < d.D; ++k) o[k] *= inv;
  }
}

// Backward of query head h of batch b: writes dQ (=) into dqkv, adds dK and dV (+=) into
// dK/dV (row stride ld_kv). S and dP: scratch of kBlock * T floats each.
ZT_VECTOR_MATH void backward_head(float* dqkv, float* dK_all, float* dV_all, int64_t ld_kv, const float* dout,
                                  const float* qkv, const float* out, const float* lse, const int32_t* seg,
                                  const Dims& d, float scale, int64_t b, int64_t h, float* S, float* dP) {
  const int64_t ld = d.qkv_ld();
  const int64_t ldo = d.out_ld();
  const int64_t g = h / d.group();
  const float* base = qkv + b * d.T * ld;
  const int ild = static_cast<int>(ld);
  const int ildo = static_cast<int>(ldo);
  const int ildkv = static_cast<int>(ld_kv);
  const int iD = static_cast<int>(d.D);
  float Di[kBlock];
  for (int64_t blk = 0; blk < d.n_blocks(); ++blk) {
    const int64_t r0 = blk * kBlock;
    const int64_t r1 = std::min(d.T, r0 + kBlock);
    const int64_t k0 = row_start(seg, d, b, r0);  // keys k0 .. r1-1, as the forward's block
    const int im = static_cast<int>(r1 - r0);
    const int in = static_cast<int>(r1 - k0);
    const int64_t n = r1 - k0;
    const float* K = base + k0 * ld + (d.Hq + g) * d.D;
    const float* V = base + k0 * ld + (d.Hq + d.Hkv + g) * d.D;
    float* dK = dK_all + k0 * ld_kv;
    float* dV = dV_all + k0 * ld_kv;
    const float* Q = base + r0 * ld + h * d.D;
    const float* dO = dout + (b * d.T + r0) * ldo + h * d.D;
    const float* O = out + (b * d.T + r0) * ldo + h * d.D;
    const float* L = lse + (b * d.Hq + h) * d.T + r0;
    float* dQ = dqkv + (b * d.T + r0) * ld + h * d.D;

    // S = scale Q K^T ; P = exp(S - lse) on the causal part, 0 elsewhere.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, im, in, iD, scale, Q, ild, K, ild, 0.0f, S, in);
    for (int64_t i = 0; i < im; ++i) {
      float* s = S + i * n;
      const int64_t lo = row_start(seg, d, b, r0 + i) - k0;
      const int64_t valid = r0 + i + 1 - k0;
      const float l = L[i];
#pragma omp simd
      for (int64_t j = lo; j < valid; ++j) s[j] = exp_approx(s[j] - l);
      for (int64_t j = 0; j < lo; ++j) s[j] = 0.0f;
      for (int64_t j = valid; j < n; ++j) s[j] = 0.0f;
      float acc = 0.0f;
      const float* go = dO + i * ldo;
      const float* o = O + i * ldo;
#pragma omp simd reduction(+ : acc)
      for (int64_t k = 0; k < d.D; ++k) acc += go[k] * o[k];
      Di[i] = acc;
    }
    // dV += P^T dO
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, iD, im, 1.0f, S, in, dO, ildo, 1.0f, dV, ildkv);
    // dP = dO V^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, im, in, iD, 1.0f, dO, ildo, V, ild, 0.0f, dP, in);
    // dS = P * (dP - D_i)   (zero where P is masked)
    for (int64_t i = 0; i < im; ++i) {
      const float* p = S + i * n;
      float* dp = dP + i * n;
      const float di = Di[i];
      for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - di);
    }
    // dQ = scale dS K ; dK += scale dS^T Q
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, iD, in, scale, dP, in, K, ild, 0.0f, dQ, ild);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, iD, im, scale, dP, in, Q, ild, 1.0f, dK, ildkv);
  }
}

void zero_rows(float* p, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) std::memset(p + r * ld, 0, static_cast<size_t>(cols) * sizeof(float));
}

// qkv: [B, T, (Hq + 2 Hkv) * D] (q heads, then k heads, then v heads); query head h reads
// kv head h / (Hq / Hkv). out: [B, T, Hq * D]. lse: [B, Hq, T] = logsumexp_j<=i(scale q_i.k_j).
// seg: [B, T] sample starts (packed samples), or null.
void attention_forward_f32(float* out, float* lse, const float* qkv, const int32_t* seg, int64_t B, int64_t T,
                           int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim, float scale) {
  const Dims d{B, T, n_q_heads, n_kv_heads, head_dim};
  if (B == 0 || T == 0) return;
  const int64_t nb = d.n_blocks();
  const int64_t tasks = B * n_q_heads * nb;
  BlasSingleThread single;
#pragma omp parallel
  {
    std::vector<float> S(static_cast<size_t>(kBlock * T));
    // Later blocks see more keys: hand out the largest first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t blk = nb - 1 - t / (B * n_q_heads);
      const int64_t bh = t % (B * n_q_heads);
      forward_block(out, lse, qkv, seg, d, scale, bh / n_q_heads, bh % n_q_heads, blk, S.data());
    }
  }
}

// dqkv (=): [B, T, (Hq + 2 Hkv) * D]. dout, out: [B, T, Hq * D]. Probabilities are recomputed
// from q, k and lse; D_i = rowsum(dout_i * out_i).
void attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                            const int32_t* seg, int64_t B, int64_t T, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
                            float scale) {
  const Dims d{B, T, n_q_heads, n_kv_heads, head_dim};
  if (B == 0 || T == 0) return;
  const int64_t ld = d.qkv_ld();
  const int64_t group = d.group();
  const int threads = omp_get_max_threads();
  BlasSingleThread single;
  if (group == 1 || B * n_kv_heads >= threads) {
    // One task per (batch, kv head): it owns dK/dV of that head and the dQ of its group.
#pragma omp parallel
    {
      std::vector<float> S(static_cast<size_t>(kBlock * T));
      std::vector<float> dP(static_cast<size_t>(kBlock * T));
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < B * n_kv_heads; ++t) {
        const int64_t b = t / n_kv_heads;
        const int64_t g = t % n_kv_heads;
        float* dK = dqkv + b * T * ld + (n_q_heads + g) * head_dim;
        float* dV = dqkv + b * T * ld + (n_q_heads + n_kv_heads + g) * head_dim;
        zero_rows(dK, T, head_dim, ld);
        zero_rows(dV, T, head_dim, ld);
        for (int64_t h = g * group; h < (g + 1) * group; ++h)
          backward_head(dqkv, dK, dV, ld, dout, qkv, out, lse, seg, d, scale, b, h, S.data(), dP.data());
      }
    }
    return;
  }
  // Few kv heads: one task per (batch, query head) with private dK/dV partials, then a
  // reduction over each group in a fixed order (deterministic).
  const int64_t part = T * head_dim;
  std::vector<float> partial(static_cast<size_t>(B * n_q_heads * 2 * part));
#pragma omp parallel
  {
    std::vector<float> S(static_cast<size_t>(kBlock * T));
    std::vector<float> dP(static_cast<size_t>(kBlock * T));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < B * n_q_heads; ++t) {
      float* dK = partial.data() + t * 2 * part;
      float* dV = dK + part;
      std::memset(dK, 0, static_cast<size_t>(2 * part) * sizeof(float));
      backward_head(dqkv, dK, dV, head_dim, dout, qkv, out, lse, seg, d, scale, t / n_q_heads, t % n_q_heads, S.data(),
                    dP.data());
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < B * n_kv_heads * T; ++t) {
      const int64_t b = t / (n_kv_heads * T);
      const int64_t g = (t / T) % n_kv_heads;
      const int64_t r = t % T;
      float* dK = dqkv + (b * T + r) * ld + (n_q_heads + g) * head_dim;
      float* dV = dqkv + (b * T + r) * ld + (n_q_heads + n_kv_heads + g) * head_dim;
      for (int64_t k = 0; k < head_dim; ++k) dK[k] = dV[k] = 0.0f;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* pk = partial.data() + (b * n_q_heads + h) * 2 * part + r * head_dim;
        const float* pv = pk + part;
        for (int64_t k = 0; k < head_dim; ++k) {
          dK[k] += pk[k];
          dV[k] += pv[k];
        }
      }
    }
  }
}

}  // namespace

namespace {
const int32_t* segments_of(const Tensor& segment_starts) {
  return segment_starts.has_data() ? segment_starts.data_as<int32_t>() : nullptr;
}
}  // namespace

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                       float scale, const Tensor& segment_starts) {
  const int64_t D = qkv.size(2) / (n_q_heads + 2 * static_cast<int64_t>(n_kv_heads));
  attention_forward_f32(out.data_as<float>(), lse.data_as<float>(), qkv.data_as<float>(), segments_of(segment_starts),
                        qkv.size(0), qkv.size(1), n_q_heads, n_kv_heads, D, scale);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_q_heads, int n_kv_heads, float scale, const Tensor& segment_starts) {
  const int64_t D = qkv.size(2) / (n_q_heads + 2 * static_cast<int64_t>(n_kv_heads));
  attention_backward_f32(dqkv.data_as<float>(), dout.data_as<float>(), qkv.data_as<float>(), out.data_as<float>(),
                         lse.data_as<float>(), segments_of(segment_starts), qkv.size(0), qkv.size(1), n_q_heads, n_kv_heads, D, scale);
}

}  // namespace zt::cpu
