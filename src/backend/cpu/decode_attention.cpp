// CPU KV-cache attention: one (batch, query head, query token) per work item, scores over
// the visible cache positions, a max-subtracted softmax with std::exp, then the weighted
// sum of values. Decode steps have Tn = 1, so the work is a few dot products per head
// and plain loops beat GEMM calls; a long prefill still parallelises over tokens.
//
// Accumulation rule: kv_cache_write overwrites cache rows; the forward overwrites out.
#include "backend/decode_attention_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace zt::cpu {
namespace {

void kv_cache_write_f32(float* k_cache, float* v_cache, const float* qkv, int64_t B, int64_t Tn, int64_t n_q_heads,
                        int64_t n_kv_heads, int64_t head_dim, int64_t capacity, int64_t start) {
  const int64_t ld = (n_q_heads + 2 * n_kv_heads) * head_dim;
  const size_t bytes = static_cast<size_t>(head_dim) * sizeof(float);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tn; ++t) {
      const float* row = qkv + (b * Tn + t) * ld;
      for (int64_t g = 0; g < n_kv_heads; ++g) {
        const int64_t dst = ((b * n_kv_heads + g) * capacity + start + t) * head_dim;
        std::memcpy(k_cache + dst, row + (n_q_heads + g) * head_dim, bytes);
        std::memcpy(v_cache + dst, row + (n_q_heads + n_kv_heads + g) * head_dim, bytes);
      }
    }
  }
}

void decode_attention_f32(float* out, const float* qkv, const float* k_cache, const float* v_cache, int64_t B,
                          int64_t Tn, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim, int64_t capacity,
                          int64_t start, float scale) {
  const int64_t D = head_dim;
  const int64_t ld = (n_q_heads + 2 * n_kv_heads) * D;
  const int64_t group = n_q_heads / n_kv_heads;
  const int64_t items = B * n_q_heads * Tn;
  const int64_t work = items * (start + Tn) * D;
#pragma omp parallel if (work > 65536)
  {
    std::vector<float> scores(static_cast<size_t>(start + Tn));
    std::vector<float> acc(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 4)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t i = item % Tn;
      const int64_t h = (item / Tn) % n_q_heads;
      const int64_t b = item / (Tn * n_q_heads);
      const int64_t g = h / group;
      const int64_t visible = start + i + 1;
      const float* q = qkv + (b * Tn + i) * ld + h * D;
      const float* K = k_cache + (b * n_kv_heads + g) * capacity * D;
      const float* V = v_cache + (b * n_kv_heads + g) * capacity * D;
      float mx = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* k = K + j * D;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
        const float s = dot * scale;
        scores[static_cast<size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < visible; ++j) {
        const float e = std::exp(scores[static_cast<size_t>(j)] - mx);
        scores[static_cast<size_t>(j)] = e;
        sum += e;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < visible; ++j) {
        const float p = scores[static_cast<size_t>(j)];
        const float* v = V + j * D;
        float* a = acc.data();
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) a[d] += p * v[d];
      }
      const float inv = 1.0f / sum;
      float* o = out + (b * Tn + i) * (n_q_heads * D) + h * D;
      for (int64_t d = 0; d < D; ++d) o[d] = acc[static_cast<size_t>(d)] * inv;
    }
  }
}

}  // namespace

void kv_cache_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                    int64_t start) {
  const int64_t D = k_cache.size(3);
  kv_cache_write_f32(k_cache.data_as<float>(), v_cache.data_as<float>(), qkv.data_as<float>(), qkv.size(0), qkv.size(1),
                     n_q_heads, n_kv_heads, D, k_cache.size(2), start);
}

void decode_attention_forward(const Tensor& out, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                              int n_q_heads, int n_kv_heads, int64_t start, float scale) {
  const int64_t D = k_cache.size(3);
  decode_attention_f32(out.data_as<float>(), qkv.data_as<float>(), k_cache.data_as<float>(), v_cache.data_as<float>(),
                       qkv.size(0), qkv.size(1), n_q_heads, n_kv_heads, D, k_cache.size(2), start, scale);
}

}  // namespace zt::cpu
