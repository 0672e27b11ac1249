// Device code of the tensor-core causal GQA attention backward (attention_tc.cu launches it;
// contract in attention_tc.h). Include only from attention_tc.cu, after
// attention_tc_kernels.cuh (whose fragment layouts, ldmatrix addressing and cp.async helpers
// this file uses and does not repeat).
//
// FlashAttention-2 backward with mma.sync m16n8k16 (bf16 or f16 operands -> f32), split
// into two kernels so that every output element has one writer (deterministic, no atomics,
// no zero fill), the same split as the f32-FMA kernels of attention_kernels.cuh:
//
//   delta   delta[b, h, t] = sum_d dO[b, t, h, d] O[b, t, h, d] (f32), kD / 8 lanes per row
//           with 16-byte loads.
//   dK, dV  grid (key tiles of 64, Hkv, B), 4 warps; warp w owns keys k0 + 16 w .. + 15.
//           K and V tiles stay in shared memory for the whole kernel. Loop over the kv
//           group's query heads, then over the query tiles of kQi rows from the key tile on
//           (causal: earlier queries see none of these keys); Q, dO tiles and their lse and
//           delta double-buffered. Per tile and warp, with keys as rows:
//             S^T  = K Q^T            (A: K rows from shared, B: Q rows, no .trans)
//             dP^T = V dO^T           (A: V rows, B: dO rows)
//             P^T  = 2^(S^T scale log2 e - lse log2 e)   (0 where query < key)
//             dS^T = P^T (dP^T - delta)
//             dV  += P^T dO           (A: P^T from the S^T accumulators, B: dO with .trans)
//             dK  += dS^T Q           (A: dS^T from the dP^T accumulators, B: Q with .trans)
//           dK is multiplied by scale at the end. GQA: the group's heads are summed by this
//           loop in a fixed order.
//   dQ      grid (query tiles of 64, Hq, B), 4 warps; warp w owns queries q0 + 16 w .. + 15,
//           Q and dO rows kept as A fragments in registers, lse and delta of its two rows per
//           thread in registers. Loop over key tiles of kKt up to the causal limit, K/V
//           double-buffered:
//             S = Q K^T, dP = dO V^T, P = 2^(S scale log2 e - lse log2 e) (0 where key > query),
//             dS = P (dP - delta), dQ += dS K (B: K with .trans); dQ *= scale at the end.
//
// P and dS are rounded to the element type E (bf16 or f16) as mma A operands (as
// FlashAttention does); S, dP and every accumulator are f32. Rows past T: Q/dO/K/V tiles
// are zero-filled; a query row past T gets lse = +inf (so P = 0) and delta = 0, a key row past T is never stored, and a key past T
// is masked for every real query (it is later than all of them).
//
// Packed samples (TcDims::seg): dK/dV's query tiles end where a sample starting after the
// block's last key begins (queries_end), dQ's key tiles begin at the tile of the block's
// first row's start (row_start); inside, a key before the query's sample start is masked
// (P = 0) like a key after the query.
//
// Register budget per thread (kD = 64): dK, dV 2 x 32, S^T, dP^T 2 x 32 f32; for kD = 128
// the query tile of dK/dV and the key tile of dQ shrink to 32 rows to stay near 160.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace zt::cuda::attn_tc {

template <int kD>
struct BwdTiles {
  static_assert(kD == 64 || kD == 128, "tensor-core attention: head dim 64 or 128");
  static constexpr int kLds = kD + 8;             // shared row stride (bf16 elements), as the forward
  static constexpr int kKeys = 64;                // dK/dV: keys per block (16 per warp)
  static constexpr int kQi = kD == 64 ? 64 : 32;  // dK/dV: queries per inner tile
  static constexpr int kQ = 64;                   // dQ: queries per block (16 per warp)
  static constexpr int kKt = kD == 64 ? 64 : 32;  // dQ: keys per inner tile
  // K, V + 2 x (Q, dO) bf16 tiles, then 2 x (lse, delta) f32 rows.
  static constexpr size_t kDkDvSmem = kElemBytes * (2 * kKeys + 4 * kQi) * kLds + sizeof(float) * 4 * kQi;
  // Q, dO + 2 x (K, V) bf16 tiles.
  static constexpr size_t kDqSmem = kElemBytes * (2 * kQ + 4 * kKt) * kLds;
};

// Issues dst[r][*] (row stride kD + 8) = src[r * ld + 0 .. kD) for r < n_rows, else 0, for
// r < kRows (cp.async, complete after commit + wait + barrier). src row 0 must be readable.
template <int kD, int kRows, class E>
__device__ __forceinline__ void load_rows(E* dst, const E* src, int64_t ld, int n_rows) {
  constexpr int kVecs = kD / 8;
  constexpr int kLds = kD + 8;
  static_assert((kRows * kVecs) % kThreads == 0, "tile shape");
#pragma unroll
  for (int i = 0; i < kRows * kVecs / kThreads; ++i) {
    const int e = threadIdx.x + i * kThreads;
    const int r = e / kVecs;
    const int c = (e % kVecs) * 8;
    const bool valid = r < n_rows;
    cp_async_16(dst + r * kLds + c, valid ? src + r * ld + c : src, valid);
  }
}

// A fragments of 16 rows x kD from a shared tile (row stride kD + 8): frag[c] covers dims
// 16 c .. 16 c + 15 (the forward's Q addressing).
template <int kD, class E>
__device__ __forceinline__ void load_a_rows(uint32_t (&frag)[kD / 16][4], const E* rows16, int lane) {
#pragma unroll
  for (int c = 0; c < kD / 16; ++c) ldmatrix_x4(frag[c], rows16 + (lane % 16) * (kD + 8) + c * 16 + (lane / 16) * 8);
}

// acc[16 x 8 kN] = A[16 x kD] B^T, B rows (row stride kD + 8) the n index: A given as
// fragments (the forward's S = Q K^T).
template <int kD, int kN, class E>
__device__ __forceinline__ void mma_rows_nt(float (&acc)[kN / 8][4], const uint32_t (&a)[kD / 16][4], const E* b_rows,
                                            int lane) {
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int jp = 0; jp < kN / 16; ++jp) {
#pragma unroll
    for (int c = 0; c < kD / 16; ++c) {
      uint32_t bb[4];
      ldmatrix_x4(bb, b_rows + (jp * 16 + lane % 8 + (lane / 16) * 8) * (kD + 8) + c * 16 + ((lane / 8) % 2) * 8);
      mma_16816<E>(acc[2 * jp], a[c], bb[0], bb[1]);
      mma_16816<E>(acc[2 * jp + 1], a[c], bb[2], bb[3]);
    }
  }
}

// acc[16 x kD] += P[16 x kN] B, P given as f32 accumulators (rounded to E here), B rows
// (row stride kD + 8) the k index (the forward's O += P V).
template <int kD, int kN, class E>
__device__ __forceinline__ void mma_acc_pv(float (&acc)[kD / 8][4], const float (&p)[kN / 8][4], const E* b_rows,
                                           int lane) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
    const uint32_t a[4] = {pack2<E>(p[2 * kk][0], p[2 * kk][1]), pack2<E>(p[2 * kk][2], p[2 * kk][3]),
                           pack2<E>(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack2<E>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t bb[4];
      ldmatrix_x4_trans(bb,
                        b_rows + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * (kD + 8) + dp * 16 + (lane / 16) * 8);
      mma_16816<E>(acc[2 * dp], a, bb[0], bb[1]);
      mma_16816<E>(acc[2 * dp + 1], a, bb[2], bb[3]);
    }
  }
}

// Stores rows r0 + g and r0 + g + 8 (< T) of a 16 x kD accumulator times mul as E at
// dst + row * ld (+ 2 t + 8 n).
template <int kD, class E>
__device__ __forceinline__ void store_rows(E* dst, int64_t ld, const float (&acc)[kD / 8][4], int r0, int T, float mul,
                                           int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    if (row >= T) continue;
    E* d = dst + row * ld + 2 * t;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) store2<E>(d + 8 * n, acc[n][2 * r] * mul, acc[n][2 * r + 1] * mul);
  }
}

// delta[(b Hq + h) T + t] = sum_d dout[row] out[row], row = (b T + t) Hq + h (memory order),
// kD / 8 lanes per row; blocks of kThreads; n_rows = B T Hq. dout, out 16-byte aligned.
template <int kD, class E>
__global__ void __launch_bounds__(kThreads)
    attention_delta_tc_kernel(float* __restrict__ delta, const E* __restrict__ dout, const E* __restrict__ out,
                              TcDims dm, int64_t n_rows) {
  constexpr int kLanes = kD / 8;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / kLanes) + threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  float acc = 0.0f;
  if (r < n_rows) {
    const uint4 a = *reinterpret_cast<const uint4*>(dout + r * kD + lane * 8);
    const uint4 o = *reinterpret_cast<const uint4*>(out + r * kD + lane * 8);
    const uint32_t a2[4] = {a.x, a.y, a.z, a.w}, o2[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 af = unpack2<E>(a2[i]), of = unpack2<E>(o2[i]);
      acc = fmaf(af.x, of.x, acc);
      acc = fmaf(af.y, of.y, acc);
    }
  }
#pragma unroll
  for (int w = kLanes / 2; w > 0; w /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, w);
  if (lane == 0 && r < n_rows) {
    const int h = static_cast<int>(r % dm.Hq);
    const int64_t bt = r / dm.Hq;
    const int tt = static_cast<int>(bt % dm.T);
    const int64_t b = bt / dm.T;
    delta[(b * dm.Hq + h) * dm.T + tt] = acc;
  }
}

// dK, dV (=) into the k and v slots of dqkv. Grid (ceil(T / 64), Hkv, B), kThreads threads,
// BwdTiles<kD>::kDkDvSmem bytes of dynamic shared memory.
template <int kD, class E, bool kPacked>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_tc_kernel(E* __restrict__ dqkv, const E* __restrict__ dout, const E* __restrict__ qkv,
                                      const float* __restrict__ lse, const float* __restrict__ delta, TcDims dm,
                                      float scale, float scale_log2) {
  using Tl = BwdTiles<kD>;
  constexpr int kLds = Tl::kLds, kQi = Tl::kQi, kKeys = Tl::kKeys;
  constexpr int kNO = kD / 8;
  constexpr int kTileQ = kQi * kLds;
  extern __shared__ uint4 attention_tc_bwd_smem[];
  E* Ks = reinterpret_cast<E*>(attention_tc_bwd_smem);  // [64][kLds]
  E* Vs = Ks + kKeys * kLds;
  E* QD = Vs + kKeys * kLds;  // buffer i: Q at QD + 2 i kTileQ, dO at QD + (2 i + 1) kTileQ
  float* stats = reinterpret_cast<float*>(QD + 4 * kTileQ);  // buffer i: lse (log2) at 2 i kQi, delta at (2 i + 1) kQi

  const int k0 = blockIdx.x * kKeys;  // first tiles have the most queries: they start first
  const int g_kv = blockIdx.y, b = blockIdx.z;
  const int group = dm.Hq / dm.Hkv;
  const int64_t ld = static_cast<int64_t>(dm.Hq + 2 * dm.Hkv) * kD;
  const int64_t out_ld = static_cast<int64_t>(dm.Hq) * kD;
  const E* seq = qkv + static_cast<int64_t>(b) * dm.T * ld;
  const E* dout_seq = dout + static_cast<int64_t>(b) * dm.T * out_ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  // (head, query tile) pairs in order: heads of the group outer, query tiles from k0 inner,
  // up to the last query that can see a key of the block (T without segments).
  const int q_end = queries_end<kPacked>(dm, b, min(k0 + kKeys, dm.T) - 1);
  const int n_qt = (q_end - k0 + kQi - 1) / kQi;
  const int total = group * n_qt;
  auto tile_head = [&](int i) { return g_kv * group + i / n_qt; };
  auto tile_q0 = [&](int i) { return k0 + (i % n_qt) * kQi; };
  auto issue = [&](int i, int buf) {
    const int h = tile_head(i), qs = tile_q0(i);
    load_rows<kD, kQi>(QD + 2 * buf * kTileQ, seq + qs * ld + h * kD, ld, dm.T - qs);
    load_rows<kD, kQi>(QD + (2 * buf + 1) * kTileQ, dout_seq + qs * out_ld + h * kD, out_ld, dm.T - qs);
  };
  // Thread q < kQi loads the lse (log2 units; +inf past T) and delta (0 past T) of query q.
  auto load_stats = [&](int i, float& l2, float& dl) {
    l2 = INFINITY;
    dl = 0.0f;
    if (threadIdx.x < kQi) {
      const int q = tile_q0(i) + threadIdx.x;
      if (q < dm.T) {
        const int64_t at = (static_cast<int64_t>(b) * dm.Hq + tile_head(i)) * dm.T + q;
        l2 = lse[at] * kLog2e;
        dl = delta[at];
      }
    }
  };
  auto store_stats = [&](int buf, float l2, float dl) {
    if (threadIdx.x < kQi) {
      stats[2 * buf * kQi + threadIdx.x] = l2;
      stats[(2 * buf + 1) * kQi + threadIdx.x] = dl;
    }
  };

  load_rows<kD, kKeys>(Ks, seq + k0 * ld + static_cast<int64_t>(dm.Hq + g_kv) * kD, ld, dm.T - k0);
  load_rows<kD, kKeys>(Vs, seq + k0 * ld + static_cast<int64_t>(dm.Hq + dm.Hkv + g_kv) * kD, ld, dm.T - k0);
  issue(0, 0);
  cp_async_commit();
  {
    float l2, dl;
    load_stats(0, l2, dl);
    store_stats(0, l2, dl);
  }

  float dk[kNO][4], dv[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  const int key_base = k0 + warp * 16 + g;  // key of c0, c1; + 8: of c2, c3
  const E* K_w = Ks + warp * 16 * kLds;
  const E* V_w = Vs + warp * 16 * kLds;

  for (int i = 0, buf = 0; i < total; ++i, buf ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // tile i (and its stats) visible; every warp is done with buffer buf ^ 1
    float next_l2 = INFINITY, next_dl = 0.0f;
    if (i + 1 < total) {
      issue(i + 1, buf ^ 1);
      cp_async_commit();
      load_stats(i + 1, next_l2, next_dl);  // stored after this tile's compute (latency hidden)
    }
    const E* Qs = QD + 2 * buf * kTileQ;
    const E* dOs = Qs + kTileQ;
    const float* lse_s = stats + 2 * buf * kQi;
    const float* del_s = lse_s + kQi;
    const int qs = tile_q0(i);

    uint32_t a[kD / 16][4];
    float s[kQi / 8][4], dp[kQi / 8][4];
    load_a_rows<kD>(a, K_w, lane);
    mma_rows_nt<kD, kQi>(s, a, Qs, lane);  // S^T = K Q^T
    load_a_rows<kD>(a, V_w, lane);
    mma_rows_nt<kD, kQi>(dp, a, dOs, lane);  // dP^T = V dO^T

    const bool diagonal = qs < k0 + kKeys;  // some query of the tile precedes some key of the block
#pragma unroll
    for (int j = 0; j < kQi / 8; ++j) {
      const float2 l2 = *reinterpret_cast<const float2*>(lse_s + 8 * j + 2 * t);
      const float2 dl = *reinterpret_cast<const float2*>(del_s + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key_base + 8 * (e / 2);
        const int q = qs + 8 * j + 2 * t + (e % 2);
        float p = exp2f(s[j][e] * scale_log2 - (e % 2 ? l2.y : l2.x));
        if (diagonal && q < key) p = 0.0f;
        if (kPacked && key < row_start<kPacked>(dm, b, q)) p = 0.0f;  // the query's sample starts after the key
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - (e % 2 ? dl.y : dl.x));
      }
    }
    mma_acc_pv<kD, kQi>(dv, s, dOs, lane);  // dV += P^T dO
    mma_acc_pv<kD, kQi>(dk, dp, Qs, lane);  // dK += dS^T Q
    if (i + 1 < total) store_stats(buf ^ 1, next_l2, next_dl);
  }

  E* dseq = dqkv + static_cast<int64_t>(b) * dm.T * ld;
  store_rows<kD>(dseq + static_cast<int64_t>(dm.Hq + g_kv) * kD, ld, dk, k0 + warp * 16, dm.T, scale, lane);
  store_rows<kD>(dseq + static_cast<int64_t>(dm.Hq + dm.Hkv + g_kv) * kD, ld, dv, k0 + warp * 16, dm.T, 1.0f, lane);
}

// dQ (=) into the q slots of dqkv. Grid (ceil(T / 64), Hq, B), kThreads threads,
// BwdTiles<kD>::kDqSmem bytes of dynamic shared memory.
template <int kD, class E, bool kPacked>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_tc_kernel(E* __restrict__ dqkv, const E* __restrict__ dout, const E* __restrict__ qkv,
                                    const float* __restrict__ lse, const float* __restrict__ delta, TcDims dm,
                                    float scale, float scale_log2) {
  using Tl = BwdTiles<kD>;
  constexpr int kLds = Tl::kLds, kQ = Tl::kQ, kKt = Tl::kKt;
  constexpr int kNO = kD / 8;
  constexpr int kTileK = kKt * kLds;
  extern __shared__ uint4 attention_tc_bwd_smem[];
  E* Qs = reinterpret_cast<E*>(attention_tc_bwd_smem);  // [64][kLds]
  E* dOs = Qs + kQ * kLds;
  E* KV = dOs + kQ * kLds;  // buffer i: K at KV + 2 i kTileK, V at KV + (2 i + 1) kTileK

  const int q0 = (gridDim.x - 1 - blockIdx.x) * kQ;  // last tiles (most keys) first
  const int h = blockIdx.y, b = blockIdx.z;
  const int g_kv = h / (dm.Hq / dm.Hkv);
  const int64_t ld = static_cast<int64_t>(dm.Hq + 2 * dm.Hkv) * kD;
  const int64_t out_ld = static_cast<int64_t>(dm.Hq) * kD;
  const E* seq = qkv + static_cast<int64_t>(b) * dm.T * ld;
  const E* k_src = seq + static_cast<int64_t>(dm.Hq + g_kv) * kD;
  const E* v_src = seq + static_cast<int64_t>(dm.Hq + dm.Hkv + g_kv) * kD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  load_rows<kD, kQ>(Qs, seq + q0 * ld + h * kD, ld, dm.T - q0);
  load_rows<kD, kQ>(dOs, dout + static_cast<int64_t>(b) * dm.T * out_ld + q0 * out_ld + h * kD, out_ld, dm.T - q0);
  const int k_first = row_start<kPacked>(dm, b, q0) / kKt * kKt;  // packed: keys before the block's first sample skipped
  load_rows<kD, kKt>(KV, k_src + k_first * ld, ld, dm.T - k_first);
  load_rows<kD, kKt>(KV + kTileK, v_src + k_first * ld, ld, dm.T - k_first);
  cp_async_commit();

  // This thread's rows: row0 = q0 + 16 warp + g and row0 + 8.
  const int row0 = q0 + warp * 16 + g;
  const int starts[2] = {row_start<kPacked>(dm, b, row0), row_start<kPacked>(dm, b, row0 + 8)};  // 0 without segments
  float l2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    const int64_t at = (static_cast<int64_t>(b) * dm.Hq + h) * dm.T + row;
    l2[r] = row < dm.T ? lse[at] * kLog2e : INFINITY;
    dl[r] = row < dm.T ? delta[at] : 0.0f;
  }

  cp_async_wait_all();
  __syncthreads();
  uint32_t qf[kD / 16][4], df[kD / 16][4];
  load_a_rows<kD>(qf, Qs + warp * 16 * kLds, lane);
  load_a_rows<kD>(df, dOs + warp * 16 * kLds, lane);

  float dq[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  const int k_end = min(q0 + kQ, dm.T);  // causal: keys < k_end
  for (int k0 = k_first, buf = 0; k0 < k_end; k0 += kKt, buf ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // tile k0 landed everywhere; every warp is done with buffer buf ^ 1
    if (k0 + kKt < k_end) {
      const int k1 = k0 + kKt;
      load_rows<kD, kKt>(KV + 2 * (buf ^ 1) * kTileK, k_src + k1 * ld, ld, dm.T - k1);
      load_rows<kD, kKt>(KV + (2 * (buf ^ 1) + 1) * kTileK, v_src + k1 * ld, ld, dm.T - k1);
      cp_async_commit();
    }
    const E* Ks = KV + 2 * buf * kTileK;
    const E* Vs = Ks + kTileK;

    float s[kKt / 8][4], dp[kKt / 8][4];
    mma_rows_nt<kD, kKt>(s, qf, Ks, lane);   // S = Q K^T
    mma_rows_nt<kD, kKt>(dp, df, Vs, lane);  // dP = dO V^T
    const bool diagonal = k0 + kKt > q0;     // some key of the tile follows some query of the block
#pragma unroll
    for (int j = 0; j < kKt / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + 8 * (e / 2);
        const int key = k0 + 8 * j + 2 * t + (e % 2);
        float p = exp2f(s[j][e] * scale_log2 - l2[e / 2]);
        if ((diagonal && key > row) || (kPacked && key < starts[e / 2])) p = 0.0f;
        dp[j][e] = p * (dp[j][e] - dl[e / 2]);
      }
    mma_acc_pv<kD, kKt>(dq, dp, Ks, lane);  // dQ += dS K
  }

  E* dseq = dqkv + static_cast<int64_t>(b) * dm.T * ld;
  store_rows<kD>(dseq + static_cast<int64_t>(h) * kD, ld, dq, q0 + warp * 16, dm.T, scale, lane);
}

}  // namespace zt::cuda::attn_tc
