// CPU phases of the split (vocabulary-parallel) cross-entropy (see
// backend/cross_entropy_kernels.h): row statistics of a logits chunk, their rescaling to
// the group's max, the loss, and the logits' gradient. One row per OpenMP iteration; the
// sum of exponentials in double, in column order (deterministic for any thread count).
#include <cmath>
#include <cstdint>

#include "backend/cross_entropy_kernels.h"

namespace zt::cpu {

void cross_entropy_slice_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t row0,
                               int64_t vocab_begin, int ignore_index) {
  const int64_t m = logits.size(0), V = logits.size(1), N = stats.size(1);
  float* mx = stats.data_as<float>();
  float* sum = mx + N;
  float* tgt = mx + 2 * N;
  const float* z = logits.data_as<float>();
  const int32_t* tg = targets.data_as<int32_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    const int64_t row = row0 + i;
    const int32_t t = tg[i];
    mx[row] = -INFINITY;
    sum[row] = 0.0f;
    tgt[row] = 0.0f;
    if (t == ignore_index || V == 0) continue;
    const float* zr = z + i * V;
    float m_row = zr[0];
    for (int64_t j = 1; j < V; ++j) m_row = zr[j] > m_row ? zr[j] : m_row;
    double s = 0.0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(static_cast<double>(zr[j] - m_row));
    mx[row] = m_row;
    sum[row] = static_cast<float>(s);
    if (t >= vocab_begin && t < vocab_begin + V) tgt[row] = zr[t - vocab_begin];
  }
}

void cross_entropy_rescale(const Tensor& stats, const Tensor& global_max) {
  const int64_t N = stats.size(1);
  float* mx = stats.data_as<float>();
  float* sum = mx + N;
  const float* g = global_max.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    // An empty share (-inf) stays 0; the row's max share keeps its sum as it is.
    sum[i] = mx[i] == -INFINITY ? 0.0f : sum[i] * std::exp(mx[i] - g[i]);
    mx[i] = g[i];
  }
}

void cross_entropy_finish(const Tensor& losses, const Tensor& lse, const Tensor& stats, const Tensor& targets,
                          int ignore_index) {
  const int64_t N = stats.size(1);
  const float* mx = stats.data_as<float>();
  const float* sum = mx + N;
  const float* tgt = mx + 2 * N;
  const int32_t* tg = targets.data_as<int32_t>();
  float* loss = losses.data_as<float>();
  float* l = lse.data_as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const bool ignored = tg[i] == ignore_index;
    l[i] = ignored ? 0.0f : mx[i] + std::log(sum[i]);
    loss[i] = ignored ? 0.0f : l[i] - tgt[i];
  }
}

void cross_entropy_dlogits(const Tensor& logits, const Tensor& lse, const Tensor& targets, int64_t vocab_begin,
                           int ignore_index, float grad_scale) {
  const int64_t m = logits.size(0), V = logits.size(1);
  float* z = logits.data_as<float>();
  const float* l = lse.data_as<float>();
  const int32_t* tg = targets.data_as<int32_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    float* zr = z + i * V;
    const int32_t t = tg[i];
    if (t == ignore_index) {
      for (int64_t j = 0; j < V; ++j) zr[j] = 0.0f;
      continue;
    }
    for (int64_t j = 0; j < V; ++j) zr[j] = grad_scale * std::exp(zr[j] - l[i]);
    if (t >= vocab_begin && t < vocab_begin + V) zr[t - vocab_begin] -= grad_scale;
  }
}

}  // namespace zt::cpu
