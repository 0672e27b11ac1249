// CUDA KV-cache attention (see backend/decode_attention_kernels.h), f32.
//
// Accumulation rule: kv_cache_write overwrites the new tokens' cache rows; the forward
// overwrites out (=). Inference only.
//
// kv_cache_write: one thread per cached element (k and v), grid-stride.
//
// decode_attention_forward: one block of kWarps warps per (query token, query head,
// sequence). Lane l holds q[l + 32 k] (k < D / 32 rounded up, D <= 128), so a warp reads
// one key row as coalesced 128-byte lines and reduces the dot product with shuffles.
// Warp w takes cache positions w, w + kWarps, ... and keeps an online softmax (running
// max m, sum l, and the weighted value sum acc, rescaled by exp(m_old - m_new) when the
// max grows); the warps' partial states merge through shared memory at the end. A decode
// step (Tn = 1) is one block per head reading the head's visible keys and values once:
// memory-bound, as decoding is. No scratch, no host synchronisation, deterministic
// (a fixed order of sums per block).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/attention_kernels.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/decode_attention_kernels.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kLanes = 32;
constexpr int kMaxChunks = kAttentionMaxHeadDim / kLanes;  // q/acc values per lane
constexpr int kCopyThreads = 256;

__global__ void kv_cache_write_kernel(float* __restrict__ k_cache, float* __restrict__ v_cache,
                                      const float* __restrict__ qkv, int64_t Tn, int n_q_heads, int n_kv_heads, int D,
                                      int64_t S, int64_t start, int64_t total) {
  const int64_t ld = static_cast<int64_t>(n_q_heads + 2 * n_kv_heads) * D;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // e = ((b * Tn + t) * Hkv + g) * D + d: consecutive threads copy consecutive channels.
    const int d = static_cast<int>(e % D);
    const int64_t rest = e / D;
    const int g = static_cast<int>(rest % n_kv_heads);
    const int64_t bt = rest / n_kv_heads;
    const int64_t t = bt % Tn, b = bt / Tn;
    const float* row = qkv + bt * ld;
    const int64_t dst = ((b * n_kv_heads + g) * S + start + t) * D + d;
    k_cache[dst] = row[static_cast<int64_t>(n_q_heads + g) * D + d];
    v_cache[dst] = row[static_cast<int64_t>(n_q_heads + n_kv_heads + g) * D + d];
  }
}

__device__ float warp_sum(float v) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// grid: (Tn, Hq, B); block: kWarps * 32 threads.
__global__ void decode_attention_kernel(float* __restrict__ out, const float* __restrict__ qkv,
                                        const float* __restrict__ k_cache, const float* __restrict__ v_cache,
                                        int n_q_heads, int n_kv_heads, int D, int64_t S, int64_t start, float scale) {
  const int64_t i = blockIdx.x, Tn = gridDim.x;
  const int h = static_cast<int>(blockIdx.y);
  const int64_t b = blockIdx.z;
  const int lane = static_cast<int>(threadIdx.x) % kLanes, warp = static_cast<int>(threadIdx.x) / kLanes;
  const int g = h / (n_q_heads / n_kv_heads);
  const int64_t ld = static_cast<int64_t>(n_q_heads + 2 * n_kv_heads) * D;
  const float* q = qkv + (b * Tn + i) * ld + static_cast<int64_t>(h) * D;
  const float* K = k_cache + (b * n_kv_heads + g) * S * D;
  const float* V = v_cache + (b * n_kv_heads + g) * S * D;
  const int64_t visible = start + i + 1;

  float qr[kMaxChunks], acc[kMaxChunks];
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int d = lane + c * kLanes;
    qr[c] = d < D ? q[d] * scale : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j < visible; j += kWarps) {
    const float* k = K + j * D;
    float part = 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int d = lane + c * kLanes;
      if (d < D) part += qr[c] * k[d];
    }
    const float s = warp_sum(part);
    const float m_new = fmaxf(m, s);
    const float corr = __expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = __expf(s - m_new);
    l = l * corr + p;
    const float* v = V + j * D;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int d = lane + c * kLanes;
      if (d < D) acc[c] = acc[c] * corr + p * v[d];
    }
    m = m_new;
  }

  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kAttentionMaxHeadDim];
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int d = lane + c * kLanes;
    if (d < D) s_acc[warp][d] = acc[c];
  }
  __syncthreads();
  float M = s_m[0];  // warp 0 always has position 0
#pragma unroll
  for (int w = 1; w < kWarps; ++w) M = fmaxf(M, s_m[w]);
  float L = 0.0f, wgt[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    wgt[w] = s_m[w] == -INFINITY ? 0.0f : __expf(s_m[w] - M);  // a warp with no positions adds nothing
    L += s_l[w] * wgt[w];
  }
  const float inv = 1.0f / L;
  float* o = out + (b * Tn + i) * (static_cast<int64_t>(n_q_heads) * D) + static_cast<int64_t>(h) * D;
  for (int d = static_cast<int>(threadIdx.x); d < D; d += kWarps * kLanes) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_acc[w][d] * wgt[w];
    o[d] = sum * inv;
  }
}

unsigned copy_blocks(int64_t work) {
  return static_cast<unsigned>(std::min<int64_t>((work + kCopyThreads - 1) / kCopyThreads, 65536));
}

void check_head_dim(const char* op, int64_t D) {
  if (D > kAttentionMaxHeadDim)
    ZT_THROW_UNSUPPORTED("cuda ", op, ": head dim ", D, " exceeds the kernel's ", kAttentionMaxHeadDim);
}

}  // namespace

void kv_cache_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                    int64_t start) {
  const int64_t B = qkv.size(0), Tn = qkv.size(1), D = k_cache.size(3), S = k_cache.size(2);
  const int64_t total = B * Tn * n_kv_heads * D;
  if (total == 0) return;
  ZT_CHECK(D <= INT_MAX, "cuda kv_cache_write: head dim too large");
  kv_cache_write_kernel<<<copy_blocks(total), kCopyThreads, 0, compute_stream()>>>(
      k_cache.data_as<float>(), v_cache.data_as<float>(), qkv.data_as<float>(), Tn, n_q_heads, n_kv_heads,
      static_cast<int>(D), S, start, total);
  ZT_CUDA_CHECK_LAST();
}

void decode_attention_forward(const Tensor& out, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                              int n_q_heads, int n_kv_heads, int64_t start, float scale) {
  const int64_t B = qkv.size(0), Tn = qkv.size(1), D = k_cache.size(3), S = k_cache.size(2);
  if (B * Tn == 0) return;
  check_head_dim("decode_attention_forward", D);
  ZT_CHECK(Tn <= INT_MAX && B <= 65535 && n_q_heads <= 65535, "cuda decode_attention_forward: grid too large (B=", B,
           ", Tn=", Tn, ", Hq=", n_q_heads, ")");
  const dim3 grid(static_cast<unsigned>(Tn), static_cast<unsigned>(n_q_heads), static_cast<unsigned>(B));
  decode_attention_kernel<<<grid, kWarps * kLanes, 0, compute_stream()>>>(
      out.data_as<float>(), qkv.data_as<float>(), k_cache.data_as<float>(), v_cache.data_as<float>(), n_q_heads,
      n_kv_heads, static_cast<int>(D), S, start, scale);
  ZT_CUDA_CHECK_LAST();
}

}  // namespace zt::cuda
