// CUDA LayerNorm and RMSNorm (see backend/norm_kernels.h).
//
// Accumulation rule: out, mean, rstd (=); dinp (= or +=, GradWrite); dweight, dbias (+=).
//
// Forward and dinp: one warp per row (8 rows per 256-thread block). The warp reads its row
// two or three times (statistics, then output); the row is small (C * 4 bytes) and the
// re-reads hit L1/L2. Lanes step through the row 8 elements at a time with 16-byte loads
// when C % 8 == 0 and every pointer is 16-byte aligned; otherwise element by element.
// Sums are reduced across the warp with a fixed butterfly, so results are deterministic.
// The math is the CPU backend's (backend/cpu/norm.cpp), in f32, step for step.
//
// dweight/dbias (deterministic, no atomics): the rows are cut into at most kMaxChunks
// fixed chunks (the cut depends only on N); kernel 1 has one thread per (column, chunk)
// that sums its chunk's rows in row order into an f32 scratch [K][chunks][C] (a warp reads
// 32 consecutive columns of one row: coalesced); kernel 2 has one thread per column that
// sums the chunks in chunk order and adds the total to the gradient with one rounding.
// This pass runs before the dinp kernel, so dinp may alias dout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/element_vec.cuh"
#include "backend/cuda/device/host_dispatch.cuh"
#include "backend/norm_kernels.h"
#include "core/allocator.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps (rows) per block of the row kernels
constexpr int kVec = 8;           // elements per vector step: one 16-byte load of 16-bit values, two of f32
constexpr int kColThreads = 128;  // columns per block of the column-sum kernels
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kMinChunkRows = 16;

// Sum over the warp, the same value in every lane (a fixed butterfly: deterministic).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// ---- kernels ------------------------------------------------------------------------

// One warp per row. LayerNorm: m = mean(x), r = 1/sqrt(mean((x-m)^2) + eps),
// y = (x-m) r w + b. RMSNorm: r = 1/sqrt(mean(x^2) + eps), y = (x r) w. No __restrict__
// on inp/out: the op also works in place (each element is read before it is written).
// kResidual: the row x is first made as res = ra + rb (f32 add, rounded to A: the bits of
// ops::add) and stored at inp (= res), inside the first pass over the row; the later
// passes read it back from inp (this thread's own writes, from L1/L2). That saves the
// separate add kernel's write and the norm's first read of the residual stream.
template <int V, bool kLayerNorm, bool kResidual, class A, class W>
__global__ void norm_forward_kernel(A* out, float* mean, float* rstd, A* inp, const W* weight, const W* bias, int64_t N,
                                    int C, float eps, const A* ra, const A* rb) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;  // whole warps leave together: the shuffles below see full warps
  const int lane = threadIdx.x % kWarp;
  A* x = inp + row * C;
  A* y = out + row * C;
  const float inv_c = 1.0f / static_cast<float>(C);
  // The first pass's values of x[c .. c + V): loaded, or (kResidual) made and stored.
  const auto first_load = [&](int c, float(&xv)[V]) {
    if constexpr (kResidual) {
      float bv[V];
      load_vec<V>(ra + row * C + c, xv);
      load_vec<V>(rb + row * C + c, bv);
#pragma unroll
      for (int k = 0; k < V; ++k) xv[k] = to_float(from_float<A>(xv[k] + bv[k]));
      store_vec<V>(x + c, xv);
    } else {
      load_vec<V>(x + c, xv);
    }
  };

  float m = 0.0f;
  if constexpr (kLayerNorm) {
    float s = 0.0f;
    for (int c = lane * V; c < C; c += kWarp * V) {
      float xv[V];
      first_load(c, xv);
#pragma unroll
      for (int k = 0; k < V; ++k) s += xv[k];
    }
    m = warp_sum(s) * inv_c;
  }
  float ss = 0.0f;
  for (int c = lane * V; c < C; c += kWarp * V) {
    float xv[V];
    if (kLayerNorm || !kResidual) {
      load_vec<V>(x + c, xv);
    } else {
      first_load(c, xv);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) ss += (xv[k] - m) * (xv[k] - m);
  }
  const float r = 1.0f / sqrtf(warp_sum(ss) * inv_c + eps);

  for (int c = lane * V; c < C; c += kWarp * V) {
    float xv[V], wv[V], yv[V];
    load_vec<V>(x + c, xv);
    load_vec<V>(weight + c, wv);
    if constexpr (kLayerNorm) {
      float bv[V];
      if (bias) {
        load_vec<V>(bias + c, bv);
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) bv[k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < V; ++k) yv[k] = (xv[k] - m) * r * wv[k] + bv[k];
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) yv[k] = (xv[k] * r) * wv[k];
    }
    store_vec<V>(y + c, yv);
  }
  if (lane == 0) {
    if (kLayerNorm && mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

// Partial column sums for the parameter gradients: thread (c, chunk) sums over the rows of
// its chunk in row order. partial: [K][chunks][C], K = 2 (dweight, dbias) for LayerNorm,
// 1 (dweight) for RMSNorm.
template <bool kLayerNorm, class A>
__global__ void norm_param_partials_kernel(float* __restrict__ partial, const A* __restrict__ dout,
                                           const A* __restrict__ inp, const float* __restrict__ mean,
                                           const float* __restrict__ rstd, int64_t N, int C, int64_t rows_per_chunk) {
  const int c = blockIdx.x * kColThreads + threadIdx.x;
  if (c >= C) return;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float aw = 0.0f, ab = 0.0f;
  for (int64_t n = r0; n < r1; ++n) {
    const float d = to_float(dout[n * C + c]);
    const float x = to_float(inp[n * C + c]);
    if constexpr (kLayerNorm) {
      aw += d * ((x - mean[n]) * rstd[n]);
      ab += d;
    } else {
      aw += d * (x * rstd[n]);
    }
  }
  partial[chunk * C + c] = aw;
  if constexpr (kLayerNorm) partial[(chunks + chunk) * C + c] = ab;
}

// grad[c] += sum over chunks of partial[chunk][c], summed in chunk order in f32, one rounding.
template <class G>
__global__ void add_column_sums_kernel(G* __restrict__ grad, const float* __restrict__ partial, int64_t chunks, int C) {
  const int c = blockIdx.x * kColThreads + threadIdx.x;
  if (c >= C) return;
  float acc = partial[c];
  for (int64_t k = 1; k < chunks; ++k) acc += partial[k * C + c];
  grad[c] = from_float<G>(to_float(grad[c]) + acc);
}

// dinp, one warp per row. With xn = (x - m) r (LayerNorm) or x r (RMSNorm), dn = w d:
// dx = (dn - mean(dn) - xn mean(dn xn)) r   (RMSNorm: no mean(dn) term).
// kAccumulate: dinp += dx (f32 add, one rounding), else dinp = dx.
// No __restrict__ on dout/dinp: dinp may alias dout when overwritten (each element is read
// before it is written).
template <int V, bool kLayerNorm, bool kAccumulate, class A, class W>
__global__ void norm_dinp_kernel(A* dinp, const A* dout, const A* inp, const W* weight, const float* mean,
                                 const float* rstd, int64_t N, int C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;
  const int lane = threadIdx.x % kWarp;
  const A* x = inp + row * C;
  const A* d = dout + row * C;
  A* dx = dinp + row * C;
  const float inv_c = 1.0f / static_cast<float>(C);
  const float m = kLayerNorm ? mean[row] : 0.0f;
  const float r = rstd[row];

  float s1 = 0.0f, s2 = 0.0f;
  for (int c = lane * V; c < C; c += kWarp * V) {
    float xv[V], dv[V], wv[V];
    load_vec<V>(x + c, xv);
    load_vec<V>(d + c, dv);
    load_vec<V>(weight + c, wv);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float dn = wv[k] * dv[k];
      s1 += dn;
      s2 += dn * ((xv[k] - m) * r);
    }
  }
  float mean_dn = 0.0f;
  if constexpr (kLayerNorm) mean_dn = warp_sum(s1) * inv_c;
  const float mean_dn_n = warp_sum(s2) * inv_c;

  for (int c = lane * V; c < C; c += kWarp * V) {
    float xv[V], dv[V], wv[V], gv[V];
    load_vec<V>(x + c, xv);
    load_vec<V>(d + c, dv);
    load_vec<V>(weight + c, wv);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float xn = (xv[k] - m) * r;
      gv[k] = (wv[k] * dv[k] - mean_dn - xn * mean_dn_n) * r;
    }
    if constexpr (kAccumulate) {
      float ov[V];
      load_vec<V>(dx + c, ov);
#pragma unroll
      for (int k = 0; k < V; ++k) gv[k] = ov[k] + gv[k];
    }
    store_vec<V>(dx + c, gv);
  }
}

// ---- host side ----------------------------------------------------------------------

struct Rows {
  int64_t N = 0;
  int C = 0;
};

Rows rows_of(const char* op, const Tensor& act, const Tensor& weight) {
  const int64_t C = weight.numel();
  ZT_CHECK(C <= INT_MAX, op, ": C = ", C, " is too large for the CUDA kernels");
  Rows r;
  r.C = static_cast<int>(C);
  r.N = C ? act.numel() / C : 0;
  ZT_CHECK((r.N + kRowsPerBlock - 1) / kRowsPerBlock <= INT_MAX, op, ": too many rows (", r.N, ")");
  return r;
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

// res, ra, rb: undefined for the plain norm of inp; else inp is res = ra + rb (made here).
template <bool kLayerNorm>
void norm_forward(const char* op, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                  const Tensor& weight, const Tensor& bias, float eps, const Tensor& ra = Tensor{},
                  const Tensor& rb = Tensor{}) {
  const Rows rows = rows_of(op, inp, weight);
  if (rows.N == 0 || rows.C == 0) return;
  ZT_CHECK(out.dtype() == inp.dtype(), op, ": out and inp must have one dtype, got ", dtype_name(out.dtype()), " and ",
           dtype_name(inp.dtype()));
  const bool residual = ra.has_data();
  ZT_CHECK(!residual || (ra.dtype() == inp.dtype() && rb.dtype() == inp.dtype()), op,
           ": the residual add's inputs must have the dtype of res");
  cudaStream_t stream = compute_stream();
  dispatch_activation("cuda norm", inp.dtype(), [&](auto at) {
    dispatch_param(weight.dtype(), [&](auto wt) {
      using A = typename decltype(at)::type;
      using W = typename decltype(wt)::type;
      A* y = out.storage_as<A>();
      A* x = inp.storage_as<A>();
      const W* w = weight.storage_as<const W>();
      const W* b = kLayerNorm ? bias.storage_as<const W>() : nullptr;
      const A* a1 = residual ? ra.storage_as<const A>() : nullptr;
      const A* a2 = residual ? rb.storage_as<const A>() : nullptr;
      const bool vec = rows.C % kVec == 0 && aligned16(y) && aligned16(x) && aligned16(w) && aligned16(b) &&
                       aligned16(a1) && aligned16(a2);
      const auto launch = [&](auto kernel) {
        kernel<<<row_blocks(rows.N), kRowsPerBlock * kWarp, 0, stream>>>(
            y, mean.storage_as<float>(), rstd.storage_as<float>(), x, w, b, rows.N, rows.C, eps, a1, a2);
        ZT_CUDA_CHECK_LAST();
      };
      if (vec) {
        residual ? launch(norm_forward_kernel<kVec, kLayerNorm, true, A, W>)
                 : launch(norm_forward_kernel<kVec, kLayerNorm, false, A, W>);
      } else {
        residual ? launch(norm_forward_kernel<1, kLayerNorm, true, A, W>)
                 : launch(norm_forward_kernel<1, kLayerNorm, false, A, W>);
      }
    });
  });
}

// dweight (+=) and, for LayerNorm, dbias (+=): the two-kernel deterministic column sum.
template <bool kLayerNorm>
void norm_param_grads(const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                      const Tensor& mean, const Tensor& rstd, Rows rows, cudaStream_t stream) {
  const int64_t rows_per_chunk = std::max(kMinChunkRows, (rows.N + kMaxChunks - 1) / kMaxChunks);  // depends only on N
  const int64_t chunks = (rows.N + rows_per_chunk - 1) / rows_per_chunk;
  constexpr int K = kLayerNorm ? 2 : 1;
  Buffer partial(static_cast<size_t>(K * chunks * rows.C) * sizeof(float), Device::cuda());
  float* part = static_cast<float*>(partial.data());
  const unsigned col_blocks = static_cast<unsigned>((rows.C + kColThreads - 1) / kColThreads);
  dispatch_activation("cuda norm", dout.dtype(), [&](auto at) {
    using A = typename decltype(at)::type;
    norm_param_partials_kernel<kLayerNorm><<<dim3(col_blocks, static_cast<unsigned>(chunks)), kColThreads, 0, stream>>>(
        part, dout.storage_as<const A>(), inp.storage_as<const A>(), mean.storage_as<const float>(),
        rstd.storage_as<const float>(), rows.N, rows.C, rows_per_chunk);
    ZT_CUDA_CHECK_LAST();
  });
  const Tensor* grads[2] = {&dweight, &dbias};
  for (int k = 0; k < K; ++k) {
    const Tensor& g = *grads[k];
    if (!g.has_data()) continue;
    dispatch_param(g.dtype(), [&](auto gt) {
      using G = typename decltype(gt)::type;
      add_column_sums_kernel<<<col_blocks, kColThreads, 0, stream>>>(g.storage_as<G>(), part + k * chunks * rows.C,
                                                                     chunks, rows.C);
      ZT_CUDA_CHECK_LAST();
    });
  }
  // `partial` goes back to the stream-ordered cache here: later work on the stream runs
  // after these kernels, so reuse is safe without a sync.
}

template <bool kLayerNorm>
void norm_backward(const char* op, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                   const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                   GradWrite dinp_write) {
  const Rows rows = rows_of(op, dout, weight);
  if (rows.N == 0 || rows.C == 0) return;
  ZT_CHECK(inp.dtype() == dout.dtype() && (!dinp.has_data() || dinp.dtype() == dout.dtype()), op,
           ": dout, inp and dinp must have one dtype, got ", dtype_name(dout.dtype()), ", ", dtype_name(inp.dtype()),
           ", ", dtype_name(dinp.dtype()));
  cudaStream_t stream = compute_stream();
  if (dweight.has_data() || (kLayerNorm && dbias.has_data())) {
    norm_param_grads<kLayerNorm>(dweight, dbias, dout, inp, mean, rstd, rows, stream);
  }
  if (!dinp.has_data()) return;
  dispatch_activation("cuda norm", dout.dtype(), [&](auto at) {
    dispatch_param(weight.dtype(), [&](auto wt) {
      using A = typename decltype(at)::type;
      using W = typename decltype(wt)::type;
      A* dx = dinp.storage_as<A>();
      const A* d = dout.storage_as<const A>();
      const A* x = inp.storage_as<const A>();
      const W* w = weight.storage_as<const W>();
      const float* m = kLayerNorm ? mean.storage_as<const float>() : nullptr;
      const float* r = rstd.storage_as<const float>();
      const bool vec = rows.C % kVec == 0 && aligned16(dx) && aligned16(d) && aligned16(x) && aligned16(w);
      const auto launch = [&](auto kernel) {
        kernel<<<row_blocks(rows.N), kRowsPerBlock * kWarp, 0, stream>>>(dx, d, x, w, m, r, rows.N, rows.C);
        ZT_CUDA_CHECK_LAST();
      };
      const bool acc = dinp_write == GradWrite::Accumulate;
      if (vec) {
        acc ? launch(norm_dinp_kernel<kVec, kLayerNorm, true, A, W>)
            : launch(norm_dinp_kernel<kVec, kLayerNorm, false, A, W>);
      } else {
        acc ? launch(norm_dinp_kernel<1, kLayerNorm, true, A, W>)
            : launch(norm_dinp_kernel<1, kLayerNorm, false, A, W>);
      }
    });
  });
}

}  // namespace

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps) {
  norm_forward<true>("cuda::layernorm_forward", out, mean, rstd, inp, weight, bias, eps);
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                        GradWrite dinp_write) {
  norm_backward<true>("cuda::layernorm_backward", dinp, dweight, dbias, dout, inp, weight, mean, rstd, dinp_write);
}

void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  norm_forward<false>("cuda::rmsnorm_forward", out, Tensor{}, rstd, inp, weight, Tensor{}, eps);
}

void add_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias, float eps) {
  norm_forward<true>("cuda::add_layernorm_forward", out, mean, rstd, res, weight, bias, eps, a, b);
}

void add_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a, const Tensor& b,
                         const Tensor& weight, float eps) {
  norm_forward<false>("cuda::add_rmsnorm_forward", out, Tensor{}, rstd, res, weight, Tensor{}, eps, a, b);
}

void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd, GradWrite dinp_write) {
  norm_backward<false>("cuda::rmsnorm_backward", dinp, dweight, Tensor{}, dout, inp, weight, Tensor{}, rstd,
                       dinp_write);
}

}  // namespace zt::cuda
