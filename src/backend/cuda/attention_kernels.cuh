// Device code of the CUDA causal GQA attention (attention.cu launches it; see
// backend/attention_kernels.h for the contract). Include only from attention.cu.
//
// FlashAttention-2 structure, f32 SIMT arithmetic (no tensor cores yet):
//
//   forward   one block per (query tile of kQ rows, query head, batch). Q tile in shared
//             memory; loop over key tiles of kK rows up to the causal limit, K/V tile in
//             shared memory; S = Q K^T, online softmax (running max m and sum l per row,
//             f32, base-2 exponentials), O += P V with O in registers. Writes out = O / l
//             and lse = m + log(l) (natural log, as the CPU backend).
//   delta     one warp per (b, t, h): delta = rowsum(dO * O), f32 scratch [B, Hq, T].
//   dK, dV    one block per (key tile, kv head, batch). K/V tile in shared memory, dK and dV
//             in registers; loop over the kv head's query heads, then over the query tiles at
//             or after the key tile: recompute P^T = exp(K Q^T * scale - lse), dP^T = V dO^T,
//             dS^T = P^T (dP^T - delta); dV += P^T dO, dK += dS^T Q. The group sum of GQA is
//             this loop, in a fixed order: deterministic, no atomics.
//   dQ        one block per (query tile, query head, batch). Q, dO tiles in shared memory, dQ
//             in registers; loop over key tiles up to the causal limit: recompute P and dP,
//             dS = P (dP - delta); dQ += dS K.
//
// Every product is one of two block-level shared-memory "micro GEMMs" over a 128-thread
// block seen as a 16 x 8 grid of threads (ty = threadIdx.x / 8, tx = threadIdx.x % 8; the
// 8 threads of one ty are 8 consecutive lanes of one warp):
//   gemm_nt  s[i][j]    = sum_d A[ty + 16 i][d] * B[tx + 8 j][d]    (scores: rows x rows)
//   gemm_nn  acc[i][k][e] += sum_n P[ty + 16 i][n] * B[n][4 tx + 32 k + e]  (scores x values)
// So a thread always owns the tile rows ty + 16 i: a row's softmax statistics are reduced
// over its 8 lanes with shuffles, and a score tile written to shared memory by a warp is read
// back only by that warp (a __syncwarp, not a block barrier, between the two).
// Shared tiles are f32 (inputs converted on load, zero-padded past T and past D), head dims
// padded to kD in {32, 64, 128}. Row strides: kD + 4 for [rows x kD] tiles (conflict-free
// 16-byte reads of 8 different rows by 8 lanes), n + 8 for score tiles (conflict-free
// 4-byte writes by a full warp, 16-byte reads of 4 rows).
//
// Packed samples (Dims::seg, the per-token sample starts of ops/attention.h; null without
// them): query row r sees keys seg[r] .. r. Starts never decrease along a row, so a query
// tile's keys begin at its first row's start (key tiles before it are skipped, not masked),
// and a key tile's queries end where a sample starting after its last key begins (query
// tiles from there on are skipped); inside the visited tiles the start is one more mask
// term. A row with no visible key in a tile keeps m = -inf: the online softmax then rescales
// against 0 instead of m (no -inf - -inf).
//
// A faster version would: keep the tiles in bf16 and use tensor cores (mma.sync m16n8k16
// with ldmatrix, or sm_90 wgmma with a warp group per 64 query rows), keep Q fragments and
// the P fragments of the P V product in registers (FA2 register reuse: no P round trip
// through shared memory), double-buffer the K/V tile loads with cp.async or TMA, use
// 16-byte global loads, and split long sequences over more blocks when B * Hq is small.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace zt::cuda::attn {

constexpr int kThreads = 128;  // 4 warps, seen as 16 x 8 (ty, tx)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Sizes of one head-dim bucket kD (the head dim D <= kD; dims D..kD-1 are zero padding).
template <int kD>
struct Tiles {
  static_assert(kD % 32 == 0, "head dims are padded to a multiple of 32");
  static constexpr int kQ = 64;                 // query rows per tile
  static constexpr int kK = kD > 64 ? 32 : 64;  // key rows per tile (fewer for big D: registers, smem)
  static constexpr int kLd = kD + 4;            // row stride of [rows x kD] tiles
  static constexpr int kLdQK = kK + 8;          // row stride of a [kQ x kK] score tile
  static constexpr int kLdKQ = kQ + 8;          // row stride of a [kK x kQ] transposed score tile

  static constexpr size_t kForwardSmem = sizeof(float) * (kQ * kLd + 2 * kK * kLd + kQ * kLdQK);
  static constexpr size_t kDqSmem = sizeof(float) * (2 * kQ * kLd + 2 * kK * kLd + kQ * kLdQK + 2 * kQ);
  static constexpr size_t kDkDvSmem = sizeof(float) * (2 * kK * kLd + 2 * kQ * kLd + kK * kLdKQ + 2 * kQ);
};

// Problem sizes, passed by value to every kernel.
struct Dims {
  int T, Hq, Hkv, D;
  const int* seg = nullptr;  // [B, T] sample starts (packed samples), or null: one sequence per row
  __host__ __device__ int64_t qkv_ld() const { return static_cast<int64_t>(Hq + 2 * Hkv) * D; }
  __host__ __device__ int64_t out_ld() const { return static_cast<int64_t>(Hq) * D; }
  __host__ __device__ int kv_head(int h) const { return h / (Hq / Hkv); }
};

// ---- element access ---------------------------------------------------------------

__device__ __forceinline__ float as_f32(float v) { return v; }
__device__ __forceinline__ float as_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float as_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ void store_as(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_as(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_as(__half* p, float v) { *p = __float2half_rn(v); }

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

// The sample start of row t (clamped to T - 1: padding rows of a tile) of sequence b; 0
// without segments.
__device__ __forceinline__ int row_start(const Dims& dm, int b, int t) {
  return dm.seg ? __ldg(dm.seg + static_cast<int64_t>(b) * dm.T + min(t, dm.T - 1)) : 0;
}

// The first query row at or after `key` whose sample starts after `key` (T when none): the
// end of the queries that can see `key`. A binary search over the non-decreasing starts.
__device__ __forceinline__ int queries_end(const Dims& dm, int b, int key) {
  if (!dm.seg) return dm.T;
  const int* s = dm.seg + static_cast<int64_t>(b) * dm.T;
  int lo = key + 1, hi = dm.T;  // s[key] <= key: the answer is in (key, T]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (__ldg(s + mid) > key)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The reference of a row's online softmax: m, or 0 while the row has seen no key (m = -inf,
// a packed row whose sample starts after the tiles so far), so exponentials stay 0, not NaN.
__device__ __forceinline__ float softmax_ref(float m) { return m == -INFINITY ? 0.0f : m; }

__device__ __forceinline__ float* shared_floats() {
  extern __shared__ float4 attention_smem[];
  return reinterpret_cast<float*>(attention_smem);
}

// Max / sum over the 8 lanes that share a ty (lanes 8k .. 8k+7 of a warp).
__device__ __forceinline__ float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  return v;
}

// ---- block-level building blocks ----------------------------------------------------

// dst[r][d] (row stride ldd, f32) = src[r * ld + d] for r < n_rows and d < D, else 0, for
// r < kRows and d < kD. Consecutive threads read consecutive elements of a row.
template <int kRows, int kD, class T>
__device__ __forceinline__ void load_tile(float* dst, int ldd, const T* src, int64_t ld, int n_rows, int D) {
  for (int e = threadIdx.x; e < kRows * kD; e += kThreads) {
    const int r = e / kD;
    const int d = e % kD;
    float v = 0.0f;
    if (r < n_rows && d < D) v = as_f32(src[r * ld + d]);
    dst[r * ldd + d] = v;
  }
}

// dst[r] = src[r] * mul for r < n_rows, else 0, for r < kRows.
template <int kRows>
__device__ __forceinline__ void load_row_values(float* dst, const float* src, int n_rows, float mul) {
  for (int r = threadIdx.x; r < kRows; r += kThreads) dst[r] = r < n_rows ? src[r] * mul : 0.0f;
}

// s[i][j] = sum_{d < kD} A[ty + 16 i][d] * B[tx + 8 j][d]; A, B row-major in shared memory
// (row strides lda, ldb: multiples of 4).
template <int kM, int kN, int kD>
__device__ __forceinline__ void gemm_nt(float (&s)[kM / 16][kN / 8], const float* A, int lda, const float* B, int ldb) {
  static_assert(kM % 16 == 0 && kN % 8 == 0 && kD % 4 == 0, "tile shape");
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
#pragma unroll
  for (int i = 0; i < kM / 16; ++i)
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) s[i][j] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < kD; d += 4) {
    float4 a[kM / 16];
#pragma unroll
    for (int i = 0; i < kM / 16; ++i) a[i] = load4(A + (ty + 16 * i) * lda + d);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      const float4 b = load4(B + (tx + 8 * j) * ldb + d);
#pragma unroll
      for (int i = 0; i < kM / 16; ++i) s[i][j] = dot4(a[i], b, s[i][j]);
    }
  }
}

// acc[i][k][e] += sum_{n < kN} P[ty + 16 i][n] * B[n][4 tx + 32 k + e]; P (row stride ldp)
// and B (row stride ldb) row-major in shared memory, strides multiples of 4.
template <int kM, int kN, int kD>
__device__ __forceinline__ void gemm_nn(float (&acc)[kM / 16][kD / 32][4], const float* P, int ldp, const float* B,
                                        int ldb) {
  static_assert(kM % 16 == 0 && kN % 4 == 0 && kD % 32 == 0, "tile shape");
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
#pragma unroll 2
  for (int n = 0; n < kN; n += 4) {
    float p[kM / 16][4];
#pragma unroll
    for (int i = 0; i < kM / 16; ++i) {
      const float4 v = load4(P + (ty + 16 * i) * ldp + n);
      p[i][0] = v.x;
      p[i][1] = v.y;
      p[i][2] = v.z;
      p[i][3] = v.w;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float* b_row = B + (n + u) * ldb + 4 * tx;
#pragma unroll
      for (int k = 0; k < kD / 32; ++k) {
        const float4 b = load4(b_row + 32 * k);
#pragma unroll
        for (int i = 0; i < kM / 16; ++i) {
          acc[i][k][0] = fmaf(p[i][u], b.x, acc[i][k][0]);
          acc[i][k][1] = fmaf(p[i][u], b.y, acc[i][k][1]);
          acc[i][k][2] = fmaf(p[i][u], b.z, acc[i][k][2]);
          acc[i][k][3] = fmaf(p[i][u], b.w, acc[i][k][3]);
        }
      }
    }
  }
}

// dst[(row0 + ty + 16 i) * ld + 4 tx + 32 k + e] = acc[i][k][e] * mul for rows < T, dims < D.
template <int kM, int kD, class T>
__device__ __forceinline__ void store_rows(T* dst, int64_t ld, int row0, int T_rows, int D,
                                           const float (&acc)[kM / 16][kD / 32][4], float mul) {
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
#pragma unroll
  for (int i = 0; i < kM / 16; ++i) {
    const int row = row0 + ty + 16 * i;
    if (row >= T_rows) continue;
    T* p = dst + row * ld;
#pragma unroll
    for (int k = 0; k < kD / 32; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = 4 * tx + 32 * k + e;
        if (d < D) store_as(p + d, acc[i][k][e] * mul);
      }
  }
}

// ---- kernels ------------------------------------------------------------------------

// Grid (query tiles, Hq, B). scale_log2 = scale * log2(e).
template <int kD, class T>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ qkv, Dims dm,
                             float scale_log2) {
  using Tl = Tiles<kD>;
  constexpr int kQ = Tl::kQ, kK = Tl::kK, kLd = Tl::kLd, kLdS = Tl::kLdQK;
  float* Qs = shared_floats();  // [kQ][kLd]
  float* Ks = Qs + kQ * kLd;    // [kK][kLd]
  float* Vs = Ks + kK * kLd;    // [kK][kLd]
  float* Ps = Vs + kK * kLd;    // [kQ][kLdS]

  const int q0 = (gridDim.x - 1 - blockIdx.x) * kQ;  // last tiles (most keys) first
  const int h = blockIdx.y, b = blockIdx.z, g = dm.kv_head(h);
  const int64_t ld = dm.qkv_ld();
  const T* seq = qkv + static_cast<int64_t>(b) * dm.T * ld;  // row t of this sequence: seq + t * ld
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;

  load_tile<kQ, kD>(Qs, kLd, seq + q0 * ld + h * dm.D, ld, dm.T - q0, dm.D);

  float o[kQ / 16][kD / 32][4] = {};
  float m[kQ / 16], l[kQ / 16];  // running max (base-2 scaled scores) and sum of exponentials
#pragma unroll
  for (int i = 0; i < kQ / 16; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }

  const int k_end = min(dm.T, q0 + kQ);               // causal: no key after the tile's last row
  const int k_begin = row_start(dm, b, q0) / kK * kK;  // packed: no key before the tile's first sample
  int starts[kQ / 16];                                 // this thread's rows' sample starts
#pragma unroll
  for (int i = 0; i < kQ / 16; ++i) starts[i] = row_start(dm, b, q0 + ty + 16 * i);
  for (int k0 = k_begin; k0 < k_end; k0 += kK) {
    __syncthreads();  // the previous K/V tile is no longer read (and, first time, Q is loaded)
    load_tile<kK, kD>(Ks, kLd, seq + k0 * ld + (dm.Hq + g) * dm.D, ld, dm.T - k0, dm.D);
    load_tile<kK, kD>(Vs, kLd, seq + k0 * ld + (dm.Hq + dm.Hkv + g) * dm.D, ld, dm.T - k0, dm.D);
    __syncthreads();

    float s[kQ / 16][kK / 8];
    gemm_nt<kQ, kK, kD>(s, Qs, kLd, Ks, kLd);
#pragma unroll
    for (int i = 0; i < kQ / 16; ++i) {
      const int row = q0 + ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kK / 8; ++j) {
        const int col = k0 + tx + 8 * j;
        s[i][j] = (col <= row && col < dm.T && col >= starts[i]) ? s[i][j] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      // Without segments m_new is finite (key 0 is in the first tile and visible to every
      // row, padding rows too); a packed row may have seen no key yet (softmax_ref).
      const float m_new = fmaxf(m[i], row_max(mx));
      const float ref = softmax_ref(m_new);
      const float corr = exp2f(m[i] - ref);  // 0 on the first tile
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kK / 8; ++j) {
        s[i][j] = exp2f(s[i][j] - ref);  // masked: exp2(-inf) = 0
        sum += s[i][j];
        Ps[(ty + 16 * i) * kLdS + tx + 8 * j] = s[i][j];
      }
      l[i] = l[i] * corr + row_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int k = 0; k < kD / 32; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][k][e] *= corr;
    }
    __syncwarp();  // P rows are written and read by the same warp
    gemm_nn<kQ, kK, kD>(o, Ps, kLdS, Vs, kLd);
  }

  // out = O / l; lse = (m + log2 l) * ln 2. The 8 lanes of a row hold the same m and l.
#pragma unroll
  for (int i = 0; i < kQ / 16; ++i) {
    const int row = q0 + ty + 16 * i;
    if (row >= dm.T) continue;
    const float inv = 1.0f / l[i];
#pragma unroll
    for (int k = 0; k < kD / 32; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][k][e] *= inv;
    if (tx == 0) lse[(static_cast<int64_t>(b) * dm.Hq + h) * dm.T + row] = (m[i] + log2f(l[i])) * kLn2;
  }
  store_rows<kQ, kD>(out + static_cast<int64_t>(b) * dm.T * dm.out_ld() + h * dm.D, dm.out_ld(), q0, dm.T, dm.D, o,
                     1.0f);
}

// delta[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]. One warp per (b, t, h) row,
// rows in memory order; n_rows = B * T * Hq; any block size that is a multiple of 32.
template <class T>
__global__ void attention_delta_kernel(float* __restrict__ delta, const T* __restrict__ dout, const T* __restrict__ out,
                                       Dims dm, int64_t n_rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= n_rows) return;  // the whole warp
  const int lane = threadIdx.x % 32;
  const T* a = dout + r * dm.D;
  const T* o = out + r * dm.D;
  float acc = 0.0f;
  for (int d = lane; d < dm.D; d += 32) acc = fmaf(as_f32(a[d]), as_f32(o[d]), acc);
#pragma unroll
  for (int w = 16; w > 0; w /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, w);
  if (lane == 0) {
    const int h = static_cast<int>(r % dm.Hq);
    const int64_t bt = r / dm.Hq;
    const int t = static_cast<int>(bt % dm.T);
    const int64_t b = bt / dm.T;
    delta[(b * dm.Hq + h) * dm.T + t] = acc;
  }
}

// dQ (=) into the q slots of dqkv. Grid (query tiles, Hq, B).
template <int kD, class T>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                                 const float* __restrict__ lse, const float* __restrict__ delta, Dims dm, float scale,
                                 float scale_log2) {
  using Tl = Tiles<kD>;
  constexpr int kQ = Tl::kQ, kK = Tl::kK, kLd = Tl::kLd, kLdS = Tl::kLdQK;
  float* Qs = shared_floats();  // [kQ][kLd]
  float* dOs = Qs + kQ * kLd;   // [kQ][kLd]
  float* Ks = dOs + kQ * kLd;   // [kK][kLd]
  float* Vs = Ks + kK * kLd;    // [kK][kLd]
  float* dSs = Vs + kK * kLd;   // [kQ][kLdS]
  float* Ls = dSs + kQ * kLdS;  // [kQ] lse * log2(e)
  float* Ds = Ls + kQ;          // [kQ] delta

  const int q0 = (gridDim.x - 1 - blockIdx.x) * kQ;
  const int h = blockIdx.y, b = blockIdx.z, g = dm.kv_head(h);
  const int64_t ld = dm.qkv_ld();
  const T* seq = qkv + static_cast<int64_t>(b) * dm.T * ld;
  const int64_t stat0 = (static_cast<int64_t>(b) * dm.Hq + h) * dm.T + q0;  // lse/delta of row q0
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;

  load_tile<kQ, kD>(Qs, kLd, seq + q0 * ld + h * dm.D, ld, dm.T - q0, dm.D);
  load_tile<kQ, kD>(dOs, kLd, dout + (static_cast<int64_t>(b) * dm.T + q0) * dm.out_ld() + h * dm.D, dm.out_ld(),
                    dm.T - q0, dm.D);
  load_row_values<kQ>(Ls, lse + stat0, dm.T - q0, kLog2e);
  load_row_values<kQ>(Ds, delta + stat0, dm.T - q0, 1.0f);

  float dq[kQ / 16][kD / 32][4] = {};
  const int k_end = min(dm.T, q0 + kQ);
  const int k_begin = row_start(dm, b, q0) / kK * kK;  // packed: as the forward
  int starts[kQ / 16];
#pragma unroll
  for (int i = 0; i < kQ / 16; ++i) starts[i] = row_start(dm, b, q0 + ty + 16 * i);
  for (int k0 = k_begin; k0 < k_end; k0 += kK) {
    __syncthreads();
    load_tile<kK, kD>(Ks, kLd, seq + k0 * ld + (dm.Hq + g) * dm.D, ld, dm.T - k0, dm.D);
    load_tile<kK, kD>(Vs, kLd, seq + k0 * ld + (dm.Hq + dm.Hkv + g) * dm.D, ld, dm.T - k0, dm.D);
    __syncthreads();

    float s[kQ / 16][kK / 8], dp[kQ / 16][kK / 8];
    gemm_nt<kQ, kK, kD>(s, Qs, kLd, Ks, kLd);    // q . k
    gemm_nt<kQ, kK, kD>(dp, dOs, kLd, Vs, kLd);  // dO . v
#pragma unroll
    for (int i = 0; i < kQ / 16; ++i) {
      const int r = ty + 16 * i;
      const int row = q0 + r;
#pragma unroll
      for (int j = 0; j < kK / 8; ++j) {
        const int col = k0 + tx + 8 * j;
        const float p =
            (col <= row && row < dm.T && col >= starts[i]) ? exp2f(s[i][j] * scale_log2 - Ls[r]) : 0.0f;
        dSs[r * kLdS + tx + 8 * j] = p * (dp[i][j] - Ds[r]);
      }
    }
    __syncwarp();
    gemm_nn<kQ, kK, kD>(dq, dSs, kLdS, Ks, kLd);  // dQ += dS K
  }
  store_rows<kQ, kD>(dqkv + static_cast<int64_t>(b) * dm.T * ld + h * dm.D, ld, q0, dm.T, dm.D, dq, scale);
}

// dK, dV (=) into the k and v slots of dqkv. Grid (key tiles, Hkv, B).
template <int kD, class T>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                                   const float* __restrict__ lse, const float* __restrict__ delta, Dims dm, float scale,
                                   float scale_log2) {
  using Tl = Tiles<kD>;
  constexpr int kQ = Tl::kQ, kK = Tl::kK, kLd = Tl::kLd, kLdS = Tl::kLdKQ;
  float* Ks = shared_floats();  // [kK][kLd]
  float* Vs = Ks + kK * kLd;    // [kK][kLd]
  float* Qs = Vs + kK * kLd;    // [kQ][kLd]
  float* dOs = Qs + kQ * kLd;   // [kQ][kLd]
  float* Ss = dOs + kQ * kLd;   // [kK][kLdS]: P^T, then dS^T
  float* Ls = Ss + kK * kLdS;   // [kQ] lse * log2(e)
  float* Ds = Ls + kQ;          // [kQ] delta

  const int k0 = blockIdx.x * kK;  // first tiles see the most queries: they start first
  const int g = blockIdx.y, b = blockIdx.z;
  const int64_t ld = dm.qkv_ld();
  const T* seq = qkv + static_cast<int64_t>(b) * dm.T * ld;
  const T* dout_seq = dout + static_cast<int64_t>(b) * dm.T * dm.out_ld();
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;

  load_tile<kK, kD>(Ks, kLd, seq + k0 * ld + (dm.Hq + g) * dm.D, ld, dm.T - k0, dm.D);
  load_tile<kK, kD>(Vs, kLd, seq + k0 * ld + (dm.Hq + dm.Hkv + g) * dm.D, ld, dm.T - k0, dm.D);

  float dk[kK / 16][kD / 32][4] = {};
  float dv[kK / 16][kD / 32][4] = {};
  const int group = dm.Hq / dm.Hkv;
  // Packed: queries from the first sample starting after the tile's last key see none of it.
  const int q_end = queries_end(dm, b, min(k0 + kK, dm.T) - 1);
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const int64_t stat_h = (static_cast<int64_t>(b) * dm.Hq + h) * dm.T;
    for (int q0 = k0 / kQ * kQ; q0 < q_end; q0 += kQ) {  // causal: rows before the tile's first key see none of it
      __syncthreads();  // previous Q/dO/stat tiles and Ss no longer read (first time: K/V loaded)
      load_tile<kQ, kD>(Qs, kLd, seq + q0 * ld + h * dm.D, ld, dm.T - q0, dm.D);
      load_tile<kQ, kD>(dOs, kLd, dout_seq + q0 * dm.out_ld() + h * dm.D, dm.out_ld(), dm.T - q0, dm.D);
      load_row_values<kQ>(Ls, lse + stat_h + q0, dm.T - q0, kLog2e);
      load_row_values<kQ>(Ds, delta + stat_h + q0, dm.T - q0, 1.0f);
      __syncthreads();

      float s[kK / 16][kQ / 8], dp[kK / 16][kQ / 8];
      gemm_nt<kK, kQ, kD>(s, Ks, kLd, Qs, kLd);    // k . q
      gemm_nt<kK, kQ, kD>(dp, Vs, kLd, dOs, kLd);  // v . dO
#pragma unroll
      for (int i = 0; i < kK / 16; ++i) {
        const int key = k0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < kQ / 8; ++j) {
          const int c = tx + 8 * j;
          const int query = q0 + c;
          const float p = (key <= query && query < dm.T && key >= row_start(dm, b, query))
                              ? exp2f(s[i][j] * scale_log2 - Ls[c])
                              : 0.0f;
          dp[i][j] = p * (dp[i][j] - Ds[c]);  // dS^T
          Ss[(ty + 16 * i) * kLdS + c] = p;   // P^T
        }
      }
      __syncwarp();
      gemm_nn<kK, kQ, kD>(dv, Ss, kLdS, dOs, kLd);  // dV += P^T dO
      __syncwarp();                                 // P^T read by every lane before dS^T replaces it
#pragma unroll
      for (int i = 0; i < kK / 16; ++i)
#pragma unroll
        for (int j = 0; j < kQ / 8; ++j) Ss[(ty + 16 * i) * kLdS + tx + 8 * j] = dp[i][j];
      __syncwarp();
      gemm_nn<kK, kQ, kD>(dk, Ss, kLdS, Qs, kLd);  // dK += dS^T Q
    }
  }
  T* dqkv_seq = dqkv + static_cast<int64_t>(b) * dm.T * ld;
  store_rows<kK, kD>(dqkv_seq + (dm.Hq + g) * dm.D, ld, k0, dm.T, dm.D, dk, scale);
  store_rows<kK, kD>(dqkv_seq + (dm.Hq + dm.Hkv + g) * dm.D, ld, k0, dm.T, dm.D, dv, 1.0f);
}

}  // namespace zt::cuda::attn
