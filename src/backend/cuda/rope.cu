// CUDA rotary position embedding (see backend/rope_kernels.h).
//
// Accumulation rule: in place; the backward overwrites dqkv (=) with the transpose of the
// forward rotation. No parameters.
//
// One thread per (row, rotated head, V consecutive pairs i..i+V-1): it loads x[i..] and
// x[i + D/2 ..] and the table's cos/sin[t][i..], rotates in f32 and stores both halves.
// V is one 16-byte vector of the activation (4 f32 or 8 bf16) when D/2 is a multiple of V
// and the pointers are 16-byte aligned; otherwise V = 1. Products and sums are rounded
// one by one (no FMA contraction), exactly as backend/cpu/rope.cpp writes them.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/element_vec.cuh"
#include "backend/cuda/device/host_dispatch.cuh"
#include "backend/rope_kernels.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;

// For i < D/2, c = cos[t][i], s = sin[t][i]:
//   forward:  x[i] <- x[i] c - x[i+D/2] s,   x[i+D/2] <- x[i+D/2] c + x[i] s
//   inverse:  g[i] <- g[i] c + g[i+D/2] s,   g[i+D/2] <- g[i+D/2] c - g[i] s
// cos/sin point at the table row of position 0 of this call (start already applied).
template <int V, bool kInverse, class A>
__global__ void rope_kernel(A* __restrict__ qkv, int64_t rows, int64_t T, int rot_heads, int64_t row_stride, int half,
                            const float* __restrict__ cos, const float* __restrict__ sin) {
  const int chunks = half / V;
  const int64_t per_row = static_cast<int64_t>(rot_heads) * chunks;
  const int64_t total = rows * per_row;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / per_row;
    const int64_t in_row = e - r * per_row;
    const int h = static_cast<int>(in_row / chunks);
    const int i = static_cast<int>(in_row - static_cast<int64_t>(h) * chunks) * V;
    const int64_t t = r % T;
    A* x1 = qkv + r * row_stride + static_cast<int64_t>(h) * 2 * half + i;
    A* x2 = x1 + half;
    float a[V], b[V], c[V], s[V], y1[V], y2[V];
    load_vec<V>(x1, a);
    load_vec<V>(x2, b);
    load_vec<V>(cos + t * half + i, c);
    load_vec<V>(sin + t * half + i, s);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if constexpr (kInverse) {
        y1[k] = __fadd_rn(__fmul_rn(a[k], c[k]), __fmul_rn(b[k], s[k]));
        y2[k] = __fsub_rn(__fmul_rn(b[k], c[k]), __fmul_rn(a[k], s[k]));
      } else {
        y1[k] = __fsub_rn(__fmul_rn(a[k], c[k]), __fmul_rn(b[k], s[k]));
        y2[k] = __fadd_rn(__fmul_rn(b[k], c[k]), __fmul_rn(a[k], s[k]));
      }
    }
    store_vec<V>(x1, y1);
    store_vec<V>(x2, y2);
  }
}

template <bool kInverse>
void rope_apply(const Tensor& qkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin, int64_t start) {
  if (qkv.numel() == 0) return;
  const int64_t half = cos.size(1);
  ZT_CHECK(half > 0 && half <= INT_MAX / 2, "cuda rope: bad table width ", half);
  const int64_t rows = qkv.size(0) * qkv.size(1), T = qkv.size(1);
  const int64_t row_stride = static_cast<int64_t>(n_q_heads + 2 * n_kv_heads) * 2 * half;
  const int rot_heads = n_q_heads + n_kv_heads;
  const float* c = static_cast<const float*>(cos.data()) + start * half;
  const float* s = static_cast<const float*>(sin.data()) + start * half;
  cudaStream_t stream = compute_stream();
  dispatch_activation("cuda rope", qkv.dtype(), [&](auto at) {
    using A = typename decltype(at)::type;
    constexpr int kVec = 16 / sizeof(A);  // one 16-byte vector of activations
    A* x = static_cast<A*>(qkv.data());
    const int h = static_cast<int>(half);
    const bool vec = half % kVec == 0 && aligned16(x) && aligned16(c) && aligned16(s);
    if (vec) {
      rope_kernel<kVec, kInverse>
          <<<grid_stride_blocks(rows * rot_heads * (half / kVec), kThreads), kThreads, 0, stream>>>(
              x, rows, T, rot_heads, row_stride, h, c, s);
    } else {
      rope_kernel<1, kInverse><<<grid_stride_blocks(rows * rot_heads * half, kThreads), kThreads, 0, stream>>>(
          x, rows, T, rot_heads, row_stride, h, c, s);
    }
    ZT_CUDA_CHECK_LAST();
  });
}

}  // namespace

void rope_forward_inplace(const Tensor& qkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin,
                          int64_t start) {
  rope_apply<false>(qkv, n_q_heads, n_kv_heads, cos, sin, start);
}

void rope_backward_inplace(const Tensor& dqkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin,
                           int64_t start) {
  rope_apply<true>(dqkv, n_q_heads, n_kv_heads, cos, sin, start);
}

}  // namespace zt::cuda
