// CUDA phases of the split (vocabulary-parallel) cross-entropy (see
// backend/cross_entropy_kernels.h). The logits chunk comes from ops::gemm (f32, contiguous).
// Row statistics: one block per row, each thread a strided share of the columns (max, then
// sum of exp(z - max)), the threads' partials merged in a fixed tree order (deterministic).
// The other phases are elementwise. All on the compute stream; no synchronisation.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cross_entropy_kernels.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"

namespace zt::cuda {
namespace {

constexpr int kStatThreads = 256;  // a power of two (the tree reductions)
constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void __launch_bounds__(kStatThreads)
    slice_stats_kernel(float* mx, float* sum, float* tgt, const float* z, const int32_t* targets, int64_t V,
                       int64_t row0, int64_t vocab_begin, int ignore_index) {
  __shared__ float red[kStatThreads];
  const int64_t i = blockIdx.x, row = row0 + i;
  const int32_t t = targets[i];
  if (t == ignore_index || V == 0) {
    if (threadIdx.x == 0) {
      mx[row] = -INFINITY;
      sum[row] = 0.0f;
      tgt[row] = 0.0f;
    }
    return;
  }
  const float* zr = z + i * V;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += kStatThreads) m = fmaxf(m, zr[j]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = kStatThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float row_max = red[0];
  __syncthreads();
  float part = 0.0f;
  for (int64_t j = threadIdx.x; j < V; j += kStatThreads) part += expf(zr[j] - row_max);
  red[threadIdx.x] = part;
  __syncthreads();
  for (int s = kStatThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    mx[row] = row_max;
    sum[row] = red[0];
    tgt[row] = (t >= vocab_begin && t < vocab_begin + V) ? zr[t - vocab_begin] : 0.0f;
  }
}

__global__ void rescale_kernel(float* mx, float* sum, const float* g, int64_t N) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  sum[i] = mx[i] == -INFINITY ? 0.0f : sum[i] * expf(mx[i] - g[i]);
  mx[i] = g[i];
}

__global__ void finish_kernel(float* losses, float* lse, const float* mx, const float* sum, const float* tgt,
                              const int32_t* targets, int64_t N, int ignore_index) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  const bool ignored = targets[i] == ignore_index;
  const float l = ignored ? 0.0f : mx[i] + logf(sum[i]);
  lse[i] = l;
  losses[i] = ignored ? 0.0f : l - tgt[i];
}

__global__ void dlogits_kernel(float* z, const float* lse, const int32_t* targets, int64_t m, int64_t V,
                               int64_t vocab_begin, int ignore_index, float grad_scale) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= m * V) return;
  const int64_t i = e / V, j = e % V;
  const int32_t t = targets[i];
  if (t == ignore_index) {
    z[e] = 0.0f;
    return;
  }
  const float g = grad_scale * expf(z[e] - lse[i]);
  z[e] = (t - vocab_begin == j) ? g - grad_scale : g;
}

}  // namespace

void cross_entropy_slice_stats(const Tensor& stats, const Tensor& logits, const Tensor& targets, int64_t row0,
                               int64_t vocab_begin, int ignore_index) {
  const int64_t m = logits.size(0), V = logits.size(1), N = stats.size(1);
  if (m == 0) return;
  float* mx = stats.data_as<float>();
  slice_stats_kernel<<<static_cast<unsigned>(m), kStatThreads, 0, compute_stream()>>>(
      mx, mx + N, mx + 2 * N, logits.data_as<float>(), targets.data_as<int32_t>(), V, row0, vocab_begin, ignore_index);
  ZT_CUDA_CHECK_LAST();
}

void cross_entropy_rescale(const Tensor& stats, const Tensor& global_max) {
  const int64_t N = stats.size(1);
  float* mx = stats.data_as<float>();
  rescale_kernel<<<blocks_for(N), kThreads, 0, compute_stream()>>>(mx, mx + N, global_max.data_as<float>(), N);
  ZT_CUDA_CHECK_LAST();
}

void cross_entropy_finish(const Tensor& losses, const Tensor& lse, const Tensor& stats, const Tensor& targets,
                          int ignore_index) {
  const int64_t N = stats.size(1);
  const float* mx = stats.data_as<float>();
  finish_kernel<<<blocks_for(N), kThreads, 0, compute_stream()>>>(losses.data_as<float>(), lse.data_as<float>(), mx,
                                                                  mx + N, mx + 2 * N, targets.data_as<int32_t>(), N,
                                                                  ignore_index);
  ZT_CUDA_CHECK_LAST();
}

void cross_entropy_dlogits(const Tensor& logits, const Tensor& lse, const Tensor& targets, int64_t vocab_begin,
                           int ignore_index, float grad_scale) {
  const int64_t m = logits.size(0), V = logits.size(1);
  if (m * V == 0) return;
  dlogits_kernel<<<blocks_for(m * V), kThreads, 0, compute_stream()>>>(logits.data_as<float>(), lse.data_as<float>(),
                                                                       targets.data_as<int32_t>(), m, V, vocab_begin,
                                                                       ignore_index, grad_scale);
  ZT_CUDA_CHECK_LAST();
}

}  // namespace zt::cuda
