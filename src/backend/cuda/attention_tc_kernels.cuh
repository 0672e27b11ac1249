// Device code of the tensor-core causal GQA attention forward (attention_tc.cu launches it;
// contract in attention_tc.h). Include only from attention_tc.cu.
//
// FlashAttention-2 forward with warp-level mma.sync.aligned.m16n8k16 (E x E -> f32) for
// activations of element type E = bf16 or f16 (the same fragments and code; only the mma
// and the rounding of P differ), head dim kD in {64, 128} exactly (no padding in D):
//
//   grid (query tiles of 64 rows, Hq, B), 128 threads = 4 warps; warp w owns query rows
//   q0 + 16 w .. q0 + 16 w + 15. Blocks with the most keys (last query tiles) start first.
//   1. The Q tile [64 x kD] is copied to shared memory, then each warp keeps its 16 rows as
//      mma A fragments in registers for the whole kernel (q[kD / 16][4]).
//   2. For each key tile k0 = 0, 64, .., q0 (tiles above the diagonal are skipped: the last
//      one, k0 == q0, is the diagonal tile): K and V tiles [64 x kD] in shared memory (rows
//      past T are zero; double-buffered: the cp.async copy of the next tile runs while this
//      one is computed), S = Q K^T [16 x 64] per warp in f32 accumulators (8 n-tiles of 8
//      keys), scaled by scale * log2(e); on the diagonal tile key > query is -inf. Online
//      softmax per row (base-2): m_new = max(m, rowmax S), corr = 2^(m - m_new),
//      P = 2^(S - m_new), l = l * corr + rowsum P, O = O * corr + P V, where P is rounded to
//      E and used straight from registers as the A operand of the P V mma.
//   3. out = O / l as E; lse = (m + log2 l) * ln 2, the natural-log log-sum-exp of the
//      scaled scores (the same definition as attention_kernels.cuh's forward, which the
//      backward reads).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16), with
// g = lane / 4 (groupID) and t = lane % 4 (thread in group); each .b32 register holds two
// bf16, the lower column/row index in the low 16 bits:
//   A (16 x 16, row major) a0: (row g,     cols 2t, 2t+1)    a1: (row g + 8, cols 2t, 2t+1)
//                          a2: (row g,     cols 2t+8, 2t+9)  a3: (row g + 8, cols 2t+8, 2t+9)
//   B (16 x 8, "col")      b0: (rows 2t, 2t+1,   col g)      b1: (rows 2t+8, 2t+9, col g)
//   C/D (16 x 8, f32)      c0, c1: (row g, cols 2t, 2t+1)    c2, c3: (row g + 8, cols 2t, 2t+1)
// So a thread holds two query rows, g and g + 8 of its warp's 16; a row's 64 scores of a key
// tile are spread over the 4 lanes of a quad (lanes 4g .. 4g + 3), and row max / sum are
// reduced with shfl_xor 1 and 2.
//   P as A operand: the C fragment of score n-tiles 2kk and 2kk+1 (keys 16kk .. 16kk + 15) is
//   the A fragment of key chunk kk: a0 = (s[2kk][0], s[2kk][1]), a1 = (s[2kk][2], s[2kk][3]),
//   a2 = (s[2kk+1][0], s[2kk+1][1]), a3 = (s[2kk+1][2], s[2kk+1][3]).
//
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8i .. 8i + 7 give the addresses of
// the 8 rows (16 bytes each) of matrix i, and register ri receives matrix i: without .trans
// lane l gets (row l / 4, cols 2 (l % 4), 2 (l % 4) + 1); with .trans lane l gets
// (rows 2 (l % 4), 2 (l % 4) + 1, col l / 4).
//   Q (A operand, rows r0.., dims c0..):  lane address row r0 + l % 16, dim c0 + 8 (l / 16)
//     -> matrices (rows 0-7, dims 0-7) (rows 8-15, dims 0-7) (rows 0-7, dims 8-15)
//        (rows 8-15, dims 8-15) = a0 a1 a2 a3.
//   K (B operand of Q K^T, B[d][key] = K[key][d]; keys n0 .. n0 + 15, dims c0 .. c0 + 15):
//     lane address key n0 + l % 8 + 8 (l / 16), dim c0 + 8 ((l / 8) % 2), no .trans
//     -> r0, r1 = b0, b1 of key n-tile n0; r2, r3 = b0, b1 of key n-tile n0 + 8.
//   V (B operand of P V, B[key][d] = V[key][d]; keys k0 .. k0 + 15, dims n0 .. n0 + 15):
//     lane address key k0 + l % 8 + 8 ((l / 8) % 2), dim n0 + 8 (l / 16), with .trans
//     -> r0, r1 = b0, b1 of dim n-tile n0; r2, r3 = b0, b1 of dim n-tile n0 + 8.
//
// Shared tiles are bf16 with row stride kD + 8 elements (kD * 2 + 16 bytes): the 8 row
// addresses of one ldmatrix matrix fall in 8 different 16-byte bank groups (conflict-free).
// Global -> shared copies are 16-byte cp.async.cg (the launcher checks the alignment), rows
// past T zero-filled (src-size 0). Shared memory: Q + 2 x (K, V) = 5 tiles, 45 KiB for
// kD = 64, 85 KiB for kD = 128.
//
// Packed samples (TcDims::seg, the per-token sample starts of ops/attention.h; null without
// them): query row r sees keys seg[r] .. r. The key loop starts at the tile holding the
// block's first row's start (starts never decrease: earlier tiles are skipped, not masked),
// and the start is one more mask term on every visited tile. A row that has seen no key yet
// (its sample starts later in the block) keeps m = -inf; its exponentials are taken against
// 0 instead (softmax_ref), never -inf - -inf.
//
// Pipeline (one cp.async group per key tile; Q goes with the first tile):
//   issue Q, K0, V0 -> buffer 0; commit; wait_group 0; __syncthreads(); Q fragments
//   for tile i: wait_group 0; __syncthreads()   (tile i landed for every thread; every
//                 warp is done with tile i - 1, i.e. with buffer (i + 1) % 2)
//               issue K/V tile i + 1 -> buffer (i + 1) % 2; commit   (if any)
//               compute tile i from buffer i % 2
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace zt::cuda::attn_tc {

constexpr int kThreads = 128;  // 4 warps
constexpr int kRowsQ = 64;     // query rows per block (16 per warp)
constexpr int kRowsK = 64;     // key rows per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr size_t kElemBytes = 2;  // bf16 and f16 operands alike

// The operand types the kernels take.
template <class E>
struct IsElem : std::integral_constant<bool, std::is_same<E, __nv_bfloat16>::value || std::is_same<E, __half>::value> {
};

template <int kD>
struct TcTiles {
  static_assert(kD == 64 || kD == 128, "tensor-core attention: head dim 64 or 128");
  static constexpr int kLds = kD + 8;                                         // shared row stride in bf16 elements
  static constexpr size_t kSmem = kElemBytes * (kRowsQ + 4 * kRowsK) * kLds;  // Q, 2 x (K, V)
};

// Problem sizes (D == kD).
struct TcDims {
  int T, Hq, Hkv;
  const int* seg = nullptr;  // [B, T] sample starts (packed samples), or null: one sequence per row
};

// kPacked: the kernels are instantiated twice, with and without packed samples, so the
// unpacked instantiation compiles to exactly the causal kernel (no sample-start loads,
// compares or softmax_ref selects: they cost 2-3% of a gpt2-xl step as runtime branches).

// The sample start of row t (clamped to T - 1: padding rows) of sequence b; 0 without segments.
template <bool kPacked>
__device__ __forceinline__ int row_start(const TcDims& dm, int b, int t) {
  if constexpr (!kPacked) return 0;
  return __ldg(dm.seg + static_cast<int64_t>(b) * dm.T + min(t, dm.T - 1));
}

// The first query row after `key` whose sample starts after `key` (T when none, or without
// segments): the end of the queries that see `key`. Binary search over the non-decreasing starts.
template <bool kPacked>
__device__ __forceinline__ int queries_end(const TcDims& dm, int b, int key) {
  if constexpr (!kPacked) return dm.T;
  const int* s = dm.seg + static_cast<int64_t>(b) * dm.T;
  int lo = key + 1, hi = dm.T;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (__ldg(s + mid) > key)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// A row's online-softmax reference: m, or 0 while it has seen no key (m = -inf; only packed
// rows can: without segments key 0 is visible to every row).
template <bool kPacked>
__device__ __forceinline__ float softmax_ref(float m) {
  if constexpr (!kPacked) return m;
  return m == -INFINITY ? 0.0f : m;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// c += A B for one m16n8k16 tile (A: 4 regs, B: 2 regs, C: 4 f32; layouts above), with
// E = __nv_bfloat16 or __half operands (the fragment layouts are the same for both).
template <class E>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(IsElem<E>::value, "tensor-core attention: bf16 or f16 operands");
  if constexpr (std::is_same<E, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as one E x 2 register (round to nearest even): lo in the low 16 bits (the
// lower column index).
template <class E>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same<E, __half>::value) {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, sizeof(r));
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, sizeof(r));
  }
  return r;
}

// dst[0], dst[1] = lo, hi rounded to E (dst 4-byte aligned).
template <class E>
__device__ __forceinline__ void store2(E* dst, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(dst) = pack2<E>(lo, hi);
}

// The two E values of a 32-bit word as floats (lo: the low 16 bits).
template <class E>
__device__ __forceinline__ float2 unpack2(uint32_t w) {
  if constexpr (std::is_same<E, __half>::value) {
    __half2 v;
    memcpy(&v, &w, sizeof(v));
    return __half22float2(v);
  } else {
    __nv_bfloat162 v;
    memcpy(&v, &w, sizeof(v));
    return __bfloat1622float2(v);
  }
}

// 16-byte asynchronous copy global -> shared; zero-fills the 16 bytes (reads nothing) when
// !valid. Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Issues dst[r][*] (row stride kLds) = src[r * ld + 0 .. kD) for r < n_rows, else 0, r < 64
// (cp.async; complete after commit + wait + barrier). Consecutive threads copy consecutive
// 16-byte vectors of a row.
template <int kD, class E>
__device__ __forceinline__ void load_tile(E* dst, const E* src, int64_t ld, int n_rows) {
  constexpr int kVecs = kD / 8;  // 16-byte vectors per row
  constexpr int kLds = TcTiles<kD>::kLds;
  static_assert(kRowsQ == kRowsK && (kRowsQ * kVecs) % kThreads == 0, "tile shape");
#pragma unroll
  for (int i = 0; i < kRowsQ * kVecs / kThreads; ++i) {
    const int e = threadIdx.x + i * kThreads;
    const int r = e / kVecs;
    const int c = (e % kVecs) * 8;
    const bool valid = r < n_rows;
    cp_async_16(dst + r * kLds + c, valid ? src + r * ld + c : src, valid);  // src: row 0, always < T
  }
}

// Grid (ceil(T / 64), Hq, B), kThreads threads, TcTiles<kD>::kSmem bytes of dynamic shared
// memory. qkv [B, T, (Hq + 2 Hkv) kD], out [B, T, Hq kD] bf16, lse [B, Hq, T] f32.
// scale_log2 = scale * log2(e).
// m[2], l[2]: rows g and g + 8 of the warp: running max (base-2 scaled scores) and this
// thread's part of the running sum (its 2 columns of each n-tile; the quad's sum is taken
// at the end).
// Step 2b: scale, causal mask (diagonal tile only: key > query; this also masks keys >= T
// for rows < T), the sample-start mask (packed), online softmax. Without segments key 0
// is in the first tile and visible to every row (padding rows too), so m is finite after
// the first tile and corr = 0 there; a packed row may see no key of a tile (softmax_ref).
template <int kD, class E, bool kPacked>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(E* __restrict__ out, float* __restrict__ lse, const E* __restrict__ qkv, TcDims dm,
                                float scale_log2) {
  constexpr int kLds = TcTiles<kD>::kLds;
  constexpr int kNT = kRowsK / 8;  // score n-tiles (8 keys) per key tile
  constexpr int kNO = kD / 8;      // output n-tiles (8 dims)
  constexpr int kKD = kD / 16;     // k chunks (16 dims) of Q K^T
  extern __shared__ uint4 attention_tc_smem[];
  E* Qs = reinterpret_cast<E*>(attention_tc_smem);  // [64][kLds]
  E* KV = Qs + kRowsQ * kLds;                       // buffer i: K at KV + 2 i kTile, V at KV + (2 i + 1) kTile
  constexpr int kTile = kRowsK * kLds;

  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRowsQ;  // last tiles (most keys) first
  const int h = blockIdx.y, b = blockIdx.z;
  const int g_kv = h / (dm.Hq / dm.Hkv);
  const int64_t ld = static_cast<int64_t>(dm.Hq + 2 * dm.Hkv) * kD;
  const E* seq = qkv + static_cast<int64_t>(b) * dm.T * ld;  // row t: seq + t * ld
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;

  const E* k_src = seq + static_cast<int64_t>(dm.Hq + g_kv) * kD;
  const E* v_src = seq + static_cast<int64_t>(dm.Hq + dm.Hkv + g_kv) * kD;

  // Packed samples: the first key tile any row of the block sees; 0 without segments.
  const int k_first = row_start<kPacked>(dm, b, q0) / kRowsK * kRowsK;

  // 1. Q tile and the first K/V tile -> shared (one cp.async group); this warp's Q rows -> A fragments.
  load_tile<kD>(Qs, seq + q0 * ld + h * kD, ld, dm.T - q0);
  load_tile<kD>(KV, k_src + k_first * ld, ld, dm.T - k_first);
  load_tile<kD>(KV + kTile, v_src + k_first * ld, ld, dm.T - k_first);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  uint32_t q[kKD][4];
#pragma unroll
  for (int c = 0; c < kKD; ++c) ldmatrix_x4(q[c], Qs + (warp * 16 + lane % 16) * kLds + c * 16 + (lane / 16) * 8);

  float o[kNO][4];
#pragma unroll
  for (int n = 0; n < kNO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  // Rows g and g + 8 of the warp: running max and sum (see above the kernel).
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  const int row0 = q0 + warp * 16 + g;  // row of c0, c1; row0 + 8: row of c2, c3
  const int starts[2] = {row_start<kPacked>(dm, b, row0), row_start<kPacked>(dm, b, row0 + 8)};  // 0 without segments

  for (int k0 = k_first, buf = 0; k0 <= q0; k0 += kRowsK, buf ^= 1) {  // causal: k0 == q0 is the diagonal tile
    cp_async_wait_all();      // this thread's copies of tile k0 landed (no-op for tile 0)
    __syncthreads();          // everyone's did; every warp is done with the other buffer (tile k0 - 64)
    if (k0 + kRowsK <= q0) {  // prefetch the next key tile into the other buffer
      const int k1 = k0 + kRowsK;
      load_tile<kD>(KV + 2 * (buf ^ 1) * kTile, k_src + k1 * ld, ld, dm.T - k1);
      load_tile<kD>(KV + (2 * (buf ^ 1) + 1) * kTile, v_src + k1 * ld, ld, dm.T - k1);
      cp_async_commit();
    }
    const E* Ks = KV + 2 * buf * kTile;
    const E* Vs = Ks + kTile;

    // 2a. S = Q K^T: 16 x 64 per warp.
    float s[kNT][4];
#pragma unroll
    for (int j = 0; j < kNT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int jp = 0; jp < kNT / 2; ++jp) {
#pragma unroll
      for (int c = 0; c < kKD; ++c) {
        uint32_t kb[4];
        ldmatrix_x4(kb, Ks + (jp * 16 + lane % 8 + (lane / 16) * 8) * kLds + c * 16 + ((lane / 8) % 2) * 8);
        mma_16816<E>(s[2 * jp], q[c], kb[0], kb[1]);
        mma_16816<E>(s[2 * jp + 1], q[c], kb[2], kb[3]);
      }
    }

    // 2b. Scale, the causal and sample-start masks, online softmax (see above the kernel).
    const bool diagonal = k0 == q0;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + (e / 2) * 8;
        const int col = k0 + 8 * j + 2 * t + (e % 2);
        float v = s[j][e] * scale_log2;
        if ((diagonal && col > row) || (kPacked && col < starts[e / 2])) v = -INFINITY;
        s[j][e] = v;
        mx[e / 2] = fmaxf(mx[e / 2], v);
      }
    float corr[2], ref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      ref[r] = softmax_ref<kPacked>(m_new);
      corr[r] = exp2f(m[r] - ref[r]);  // 0 on the first tile (m = -inf)
      m[r] = m_new;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - ref[e / 2]);  // masked: exp2(-inf) = 0
        sum[e / 2] += s[j][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * corr[r] + sum[r];
#pragma unroll
    for (int n = 0; n < kNO; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }

    // 2c. O += P V with P (bf16) from the S accumulators as A fragments.
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      const uint32_t p[4] = {pack2<E>(s[2 * kk][0], s[2 * kk][1]), pack2<E>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<E>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<E>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kNO / 2; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, Vs + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kLds + dp * 16 + (lane / 16) * 8);
        mma_16816<E>(o[2 * dp], p, vb[0], vb[1]);
        mma_16816<E>(o[2 * dp + 1], p, vb[2], vb[3]);
      }
    }
  }

  // 3. out = O / l (bf16), lse = (m + log2 l) * ln 2. The quad's lanes share m.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const int64_t out_ld = static_cast<int64_t>(dm.Hq) * kD;
  E* out_seq = out + static_cast<int64_t>(b) * dm.T * out_ld + h * kD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row >= dm.T) continue;
    const float inv = 1.0f / l[r];
    E* dst = out_seq + row * out_ld + 2 * t;
#pragma unroll
    for (int n = 0; n < kNO; ++n) store2<E>(dst + 8 * n, o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (t == 0) lse[(static_cast<int64_t>(b) * dm.Hq + h) * dm.T + row] = (m[r] + log2f(l[r])) * kLn2;
  }
}

}  // namespace zt::cuda::attn_tc
