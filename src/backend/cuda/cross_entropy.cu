// CUDA LM head + softmax cross-entropy (see backend/cross_entropy_kernels.h).
//
// Accumulation rule: dinp (=), dweight (+=, rows < V only), losses (=).
//
// Logits dtype: the compute dtype ct (below). For bf16/f16 compute the logits are 16-bit,
// as PyTorch's bf16 LM head makes them (its loss upcasts them); the softmax runs in f32
// over them. That halves the bytes of the largest tensor of the step: the logits GEMM
// writes 2 bytes per logit and the two softmax passes read 2 (Llama 3.2 1B: 2.1 GB per
// step instead of 4.2). ZT_CE_F32_LOGITS=1 keeps f32 logits for 16-bit compute (the
// dlogits then go as 16-bit values over the f32 row, see softmax_xent_kernel).
//
// Chunks: the logits of a chunk of R rows, [R, ld] with ld = V rounded up to 64, get a
// 1 GiB budget (there is no other [R, V] buffer: dlogits go in place, below). From the
// largest R that fits (a multiple of 64), chunks = ceil(N / R_max) and the rows are spread
// evenly: R = ceil(N / chunks) rounded up to 64 (at most N). Several chunks need an f32
// dweight accumulator [ld, C] for a 16-bit dweight (step 4); when one chunk of all N rows
// takes no more memory than the chunk plus that accumulator, one chunk is used. GPT-2
// (N = 16384, V = 50257, bf16): 2 chunks of 8192 rows; Llama 3.2 1B (N = 8192, V = 128256,
// bf16): one chunk (2.10 GB = the 1.05 GB chunk + the 1.05 GB accumulator of two).
//
// Per chunk:
//   1. x_c = the chunk's rows of inp, in the compute dtype (act_weight_compute_dtype: the
//      weight's dtype for f32 activations, f32 when a bf16 activation meets an f32/f16
//      weight); W = weight rows [0, V) in that dtype (the weight itself but for that case).
//      W_k = W padded with zero rows to ld (made once per call, only when V % 64 != 0): the
//      logits and dinp products run over ld vocabulary columns, because for a V that is not
//      a multiple of 8 (GPT-2's 50257) cuBLASLt falls back to align-1 kernels, ~6x slower.
//      Padding rows of the weight (>= V) are never read.
//   2. Z [R, ld] (row stride ld) = x_c W_k^T: one cuBLASLt matmul, CUBLAS_COMPUTE_32F,
//      output in the logits dtype. The loss never reads columns >= V.
//   3. softmax_xent_kernel, one block per row:
//      pass 1: one read of the row (16-byte loads, several in flight per thread) with an
//        online max/sum: each thread keeps a running max m and sum s of exp(z - m), rescaling
//        s when m grows; then the (m, s) pairs are merged in a fixed order (deterministic).
//        loss = lse - z[target] into losses[row] (0 for ignored rows).
//      pass 2 (backward only): dlogits [R, ld] = grad_scale (softmax - onehot) (0 for ignored
//        rows and in the padding columns [V, ld)), written IN PLACE over the row's logits in
//        the compute dtype: at the same index when it is the logits dtype; with f32 logits
//        and 16-bit compute (ZT_CE_F32_LOGITS), as 16-bit values from the start of the row's
//        f32 storage, i.e. a 16-bit matrix with row stride 2 ld (the matmul inputs must
//        share a dtype). The order that makes this safe is described at the kernel.
//   4. dinp rows (=) = dlogits W_k (beta = 0; the padding adds zeros); dW[0:V] (+=)
//      dlogits^T x_c with beta = 1: straight into dweight (rows < V) when it is f32 or there
//      is one chunk, else into an f32 [ld, C] accumulator (zeroed once) whose rows < V are
//      added to dweight after the last chunk with one rounding (as the CPU backend does).
// The forward alone runs pass 1 only. At the end one block sums the per-row losses in double
// in a fixed order (deterministic), counts the rows and finds the first invalid target; one
// small copy brings that to the host (the only synchronisation).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cross_entropy_kernels.h"
#include "backend/cuda/matmul.h"
#include "core/dtype_dispatch.h"
#include "core/env_vars.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kRowThreads = 512;      // one block per row of a chunk; 4 blocks per SM (<= 32 registers)
constexpr int kPass1Vecs = 4;         // pass 1: float4 loads per thread per iteration (in flight together)
constexpr int kTileVecs = 2;          // pass 2: float4s per thread per tile
constexpr int kFinishThreads = 1024;  // the final reduction: one block (a power of two)
// The chunk rows, the logits row stride ld (V rounded up to 64) and the 1 GiB budget: lm_head_chunk_plan
// (backend/cross_entropy_kernels.h).

template <class T>
__device__ __forceinline__ T from_float(float f);
// core/dtype.h's to_bf16 bit for bit: round to nearest even, NaN stays a quiet NaN.
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
template <>
__device__ __forceinline__ f16 from_float<f16>(float f) {
  return f16{__half_as_ushort(__float2half_rn(f))};
}

// Stores elements j .. j+3 of a dlogits row gr (j a multiple of 4, so the address is 16-byte
// aligned for f32 and 8-byte aligned for 16-bit types), only the first `valid` of them (fewer
// than 4 at the row's end: the rest are not written).
template <class G>
__device__ __forceinline__ void store4(G* gr, int j, float4 v, int valid) {
  if constexpr (std::is_same_v<G, float>) {
    if (valid >= 4) {
      *reinterpret_cast<float4*>(gr + j) = v;
      return;
    }
    gr[j] = v.x;
    if (valid > 1) gr[j + 1] = v.y;
    if (valid > 2) gr[j + 2] = v.z;
  } else {
    const G a = from_float<G>(v.x), b = from_float<G>(v.y), c = from_float<G>(v.z), d = from_float<G>(v.w);
    if (valid >= 4) {  // little-endian: element j in the low half
      const uint32_t lo = static_cast<uint32_t>(a.bits) | (static_cast<uint32_t>(b.bits) << 16);
      const uint32_t hi = static_cast<uint32_t>(c.bits) | (static_cast<uint32_t>(d.bits) << 16);
      *reinterpret_cast<uint2*>(gr + j) = make_uint2(lo, hi);
      return;
    }
    gr[j] = a;
    if (valid > 1) gr[j + 1] = b;
    if (valid > 2) gr[j + 2] = c;
  }
}

// ---- online max / sum of exp ----
//
// State (m, s): s = sum of exp(x - m) over the values seen, m their running max (-inf: none
// yet). The exponent's reference is m, except -inf -> 0, so that exp(-inf - ref) is 0 and
// never exp(-inf + inf) = NaN: an -inf logit (or the masked padding) adds 0, exactly as in a
// two-pass max-then-sum. Special values, as the two-pass version (max with fmaxf, then sum of
// exp(x - max)) gives them:
//  - a NaN logit: fmaxf ignores it in the max, but exp(NaN - ref) = NaN enters s, and NaN
//    stays NaN through every later rescale (NaN * 0 = NaN) and merge: NaN loss.
//  - a +inf logit: m becomes +inf and that logit adds exp(inf - inf) = NaN: NaN loss (the
//    two-pass version: the max is inf, exp(inf - inf) = NaN). Hence m = +inf implies s = NaN,
//    which keeps merges with m = +inf NaN as well.
//  - a row of -inf only: m = -inf, s = 0, lse = -inf + log(0) = -inf, loss = -inf - (-inf) =
//    NaN (the two-pass version: exp(-inf - (-inf)) = NaN in the sum: NaN).
__device__ __forceinline__ float exp_ref(float m) { return m == -INFINITY ? 0.0f : m; }

// Adds K float4s of values to (m, s).
template <int K>
__device__ __forceinline__ void online_add(float& m, float& s, const float4* v) {
  float bm = m;
#pragma unroll
  for (int k = 0; k < K; ++k) bm = fmaxf(bm, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
  if (bm > m) {  // the max grows: rescale (m = -inf: s *= exp(-inf) = 0, keeping a NaN)
    s *= expf(m - bm);
    m = bm;
  }
  const float r = exp_ref(m);
  float b = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) b += (expf(v[k].x - r) + expf(v[k].y - r)) + (expf(v[k].z - r) + expf(v[k].w - r));
  s += b;
}

// (m, s) <- the merge of (m, s) and (m2, s2).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  const float r = exp_ref(mm);
  s = s * expf(m - r) + s2 * expf(m2 - r);
  m = mm;
}

// Lane 0 gets the merge of the warp's 32 pairs (a fixed tree).
__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_down_sync(0xffffffffu, m, o), s2 = __shfl_down_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
}

// Every thread gets the merge of the block's pairs (blockDim.x a multiple of 32), computed in
// a fixed order, so it does not vary from run to run. Called once per block.
__device__ void block_merge(float& m, float& s) {
  __shared__ float part_m[32], part_s[32];
  __shared__ float res_m, res_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  warp_merge(m, s);
  if (lane == 0) {
    part_m[warp] = m;
    part_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < warps ? part_m[lane] : -INFINITY;
    s = lane < warps ? part_s[lane] : 0.0f;
    warp_merge(m, s);
    if (lane == 0) {
      res_m = m;
      res_s = s;
    }
  }
  __syncthreads();
  m = res_m;
  s = res_s;
}

// dlogit of logit x at column j of a row with target t (0 in the padding columns j >= V).
__device__ __forceinline__ float dlogit(float x, int j, int t, int V, float lse, float grad_scale) {
  if (j >= V) return 0.0f;
  const float p = expf(x - lse);
  return grad_scale * (j == t ? p - 1.0f : p);
}

// One block per chunk row. z: logits [rows, ld] f32 (ld a multiple of 4, rows 16-byte
// aligned); the loss reads columns [0, V). g: null (forward only), or the dlogits [rows, Vg]
// (V <= Vg <= ld, Vg % 4 == 0; columns [V, Vg) are written as 0) in place over z: g == z
// with ldg = ld for G = float; g == z reinterpreted as 16-bit with ldg = 2 ld for bf16/f16
// (row r's dlogits start at the byte address of row r's logits).
//
// Pass 1 reads the row once (online max/sum). Every pass-1 read, and the read of z[target],
// precedes block_merge's barriers, and every write comes after them.
//
// Pass 2 (in place) goes over columns [0, Vg) in tiles of T = blockDim.x * 4 * kTileVecs
// elements, in increasing order; per tile every thread loads its kTileVecs float4s (element
// j = tile start + 4 (u blockDim.x + threadIdx.x)), then (16-bit G) __syncthreads(), then
// writes the 16-bit dlogits of the same elements at 16-bit index j. Why this is safe for
// 16-bit G: the 16-bit element j lives in the bytes of f32 element floor(j / 2), so tile k's
// writes (j in [kT, (k+1)T)) land in f32 elements [kT/2, (k+1)T/2), i.e. in tile
// floor(k/2) <= k. Every thread loaded its part of tiles 0..k before tile k's barrier, so
// those elements have been read by all threads before any of them is overwritten; and later
// tiles' loads (f32 elements >= (k+1)T) never touch bytes written so far (16-bit writes up
// to tile k end at f32 element (k+1)T/2). Bytes of a row past 2 Vg (its 16-bit dlogits) are
// left as they were: the matmuls read the 16-bit matrix [rows, Vg] with row stride 2 ld. The
// argument holds for any tile width (kTileVecs = 1 gives tiles of blockDim.x * 4); the loop
// trip count is the same in all threads, so the barrier is uniform. For G = float each
// thread overwrites exactly the elements it loaded itself: no hazard, no barrier.
//
// z and g alias: neither may be __restrict__ (nor read through the non-coherent cache).
template <class G>
__global__ void __launch_bounds__(kRowThreads, 2048 / kRowThreads)
    softmax_xent_kernel(const float* z, int64_t ld, const int32_t* __restrict__ targets, int V, int Vg,
                        int ignore_index, float* __restrict__ losses, G* g, int64_t ldg, float grad_scale) {
  const int64_t row = blockIdx.x;
  const float* zr = z + row * ld;
  G* gr = g ? g + row * ldg : nullptr;
  const int32_t t = targets[row];
  if (t == ignore_index || t < 0 || t >= V) {  // ignored (or invalid: reported by finish_kernel)
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (gr)
      for (int j = 4 * static_cast<int>(threadIdx.x); j < Vg; j += 4 * static_cast<int>(blockDim.x))
        store4(gr, j, make_float4(0.0f, 0.0f, 0.0f, 0.0f), Vg - j);
    return;
  }
  const float zt = threadIdx.x == 0 ? zr[t] : 0.0f;  // before block_merge's barriers

  // Pass 1: online max / sum over float4s; kPass1Vecs loads in flight per thread.
  const float4* z4 = reinterpret_cast<const float4*>(zr);
  const int full = V / 4;        // float4s wholly inside [0, V)
  const int nvec = (V + 3) / 4;  // the last may reach into the row's padding (ld % 4 == 0)
  const int step = blockDim.x;
  float m = -INFINITY, s = 0.0f;
  int i = threadIdx.x;
  for (; i + (kPass1Vecs - 1) * step < full; i += kPass1Vecs * step) {
    float4 v[kPass1Vecs];
#pragma unroll
    for (int u = 0; u < kPass1Vecs; ++u) v[u] = z4[i + u * step];
    online_add<kPass1Vecs>(m, s, v);
  }
  for (; i < nvec; i += step) {
    float4 v = z4[i];
    const int valid = V - 4 * i;  // padding elements count as -inf: they add 0
    if (valid < 4) v.w = -INFINITY;
    if (valid < 3) v.z = -INFINITY;
    if (valid < 2) v.y = -INFINITY;
    online_add<1>(m, s, &v);
  }
  block_merge(m, s);
  const float lse = m + logf(s);  // a NaN logit makes s, lse and the loss NaN
  if (threadIdx.x == 0) losses[row] = lse - zt;
  if (gr == nullptr) return;

  // Pass 2: dlogits = grad_scale (exp(z - lse) - onehot) for j < V, 0 for V <= j < Vg, in
  // place (see above).
  const int tile = static_cast<int>(blockDim.x) * 4 * kTileVecs;
  for (int base = 0; base < Vg; base += tile) {
    float4 v[kTileVecs];
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) {
      const int j = base + 4 * (u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x));
      v[u] = j < Vg ? *reinterpret_cast<const float4*>(zr + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if constexpr (!std::is_same_v<G, float>) __syncthreads();  // tile k read by all before it is overwritten
#pragma unroll
    for (int u = 0; u < kTileVecs; ++u) {
      const int j = base + 4 * (u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x));
      if (j < Vg) {
        float4 d;
        d.x = dlogit(v[u].x, j, t, V, lse, grad_scale);
        d.y = dlogit(v[u].y, j + 1, t, V, lse, grad_scale);
        d.z = dlogit(v[u].z, j + 2, t, V, lse, grad_scale);
        d.w = dlogit(v[u].w, j + 3, t, V, lse, grad_scale);
        store4(gr, j, d, Vg - j);
      }
    }
  }
}

// ---- 16-bit logits ----

template <class T>
__device__ __forceinline__ float to_float(uint16_t bits);
template <>
__device__ __forceinline__ float to_float<bf16>(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
template <>
__device__ __forceinline__ float to_float<f16>(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

// The 8 16-bit values of a uint4 (element 0 in the low half of .x) as floats.
template <class Z>
__device__ __forceinline__ void unpack8(uint4 u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    f[2 * h] = to_float<Z>(static_cast<uint16_t>(w[h] & 0xffffu));
    f[2 * h + 1] = to_float<Z>(static_cast<uint16_t>(w[h] >> 16));
  }
}

// (m, s) += 8 values.
__device__ __forceinline__ void online_add8(float& m, float& s, const float (&f)[8]) {
  const float4 v[2] = {make_float4(f[0], f[1], f[2], f[3]), make_float4(f[4], f[5], f[6], f[7])};
  online_add<2>(m, s, v);
}

__device__ __forceinline__ uint32_t pack2(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// softmax_xent_kernel for 16-bit logits Z (bf16 or f16): one block per chunk row. z:
// logits [rows, ld] (ld a multiple of 8, rows 16-byte aligned); the loss reads columns
// [0, V). z_out: null (forward only), or z itself: the dlogits grad_scale (softmax - onehot)
// are written over the logits at the same index, for columns [0, ld) (0 for j >= V). Each
// thread overwrites only the 8-element vectors it has itself read in pass 2, after pass 1's
// reads (which precede block_merge's barriers): no hazard, no barrier in pass 2. z and
// z_out alias: neither is __restrict__.
template <class Z>
__global__ void __launch_bounds__(kRowThreads, 2048 / kRowThreads)
    softmax_xent16_kernel(const Z* z, int64_t ld, const int32_t* __restrict__ targets, int V, int ignore_index,
                          float* __restrict__ losses, Z* z_out, float grad_scale) {
  const int64_t row = blockIdx.x;
  const Z* zr = z + row * ld;
  const int32_t t = targets[row];
  const int nvec = static_cast<int>(ld / 8);  // 8-element vectors of the row (ld % 8 == 0)
  const int step = blockDim.x;
  if (t == ignore_index || t < 0 || t >= V) {  // ignored (or invalid: reported by finish_kernel)
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (z_out) {
      uint4* o = reinterpret_cast<uint4*>(z_out + row * ld);
      for (int i = threadIdx.x; i < nvec; i += step) o[i] = make_uint4(0u, 0u, 0u, 0u);
    }
    return;
  }
  const float zt = threadIdx.x == 0 ? to_float<Z>(zr[t].bits) : 0.0f;  // before block_merge's barriers

  // Pass 1: online max / sum over 8-element vectors; kPass1Vecs loads in flight per thread.
  const uint4* z8 = reinterpret_cast<const uint4*>(zr);
  const int full = V / 8;        // vectors wholly inside [0, V)
  const int used = (V + 7) / 8;  // the last may reach into the padding (ld % 8 == 0)
  float m = -INFINITY, s = 0.0f;
  int i = threadIdx.x;
  for (; i + (kPass1Vecs - 1) * step < full; i += kPass1Vecs * step) {
    uint4 u[kPass1Vecs];
#pragma unroll
    for (int k = 0; k < kPass1Vecs; ++k) u[k] = z8[i + k * step];
#pragma unroll
    for (int k = 0; k < kPass1Vecs; ++k) {
      float f[8];
      unpack8<Z>(u[k], f);
      online_add8(m, s, f);
    }
  }
  for (; i < used; i += step) {
    float f[8];
    unpack8<Z>(z8[i], f);
    const int valid = V - 8 * i;  // padding elements count as -inf: they add 0
#pragma unroll
    for (int k = 1; k < 8; ++k)
      if (k >= valid) f[k] = -INFINITY;
    online_add8(m, s, f);
  }
  block_merge(m, s);
  const float lse = m + logf(s);  // a NaN logit makes s, lse and the loss NaN
  if (threadIdx.x == 0) losses[row] = lse - zt;
  if (z_out == nullptr) return;

  // Pass 2: dlogits over [0, ld), in place, each thread on its own vectors.
  uint4* o = reinterpret_cast<uint4*>(z_out + row * ld);
  for (int k = threadIdx.x; k < nvec; k += step) {
    float f[8];
    unpack8<Z>(o[k], f);
    uint16_t d[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) d[q] = from_float<Z>(dlogit(f[q], 8 * k + q, t, V, lse, grad_scale)).bits;
    o[k] = make_uint4(pack2(d[0], d[1]), pack2(d[2], d[3]), pack2(d[4], d[5]), pack2(d[6], d[7]));
  }
}

struct DeviceSums {
  double loss_sum;
  long long count;
  long long bad_row;  // first row with a target outside [0, V) that is not ignore_index; -1: none
  long long bad_target;
};

// One block of kFinishThreads: thread k takes rows k, k + kFinishThreads, ...; then a tree.
__global__ void __launch_bounds__(kFinishThreads)
    finish_kernel(const float* __restrict__ losses, const int32_t* __restrict__ targets, int64_t N, int64_t V,
                  int ignore_index, DeviceSums* __restrict__ out) {
  __shared__ double s_sum[kFinishThreads];
  __shared__ long long s_count[kFinishThreads];
  __shared__ long long s_bad[kFinishThreads];
  double sum = 0.0;
  long long count = 0, bad = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < N; i += kFinishThreads) {
    const int32_t t = targets[i];
    if (t == ignore_index) continue;
    if (t < 0 || t >= V) {
      bad = min(bad, static_cast<long long>(i));
      continue;
    }
    sum += static_cast<double>(losses[i]);
    ++count;
  }
  s_sum[threadIdx.x] = sum;
  s_count[threadIdx.x] = count;
  s_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int stride = kFinishThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      s_sum[threadIdx.x] += s_sum[threadIdx.x + stride];
      s_count[threadIdx.x] += s_count[threadIdx.x + stride];
      s_bad[threadIdx.x] = min(s_bad[threadIdx.x], s_bad[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out->loss_sum = s_sum[0];
    out->count = s_count[0];
    out->bad_row = s_bad[0] == LLONG_MAX ? -1 : s_bad[0];
    out->bad_target = s_bad[0] == LLONG_MAX ? 0 : targets[s_bad[0]];
  }
}

// Forward (dinp == nullptr) or forward + backward. losses may be null.
CrossEntropySums run(const Tensor* dinp, const Tensor* dweight, const Tensor& inp, const Tensor& weight,
                     const Tensor& targets, int64_t V, int ignore_index, const Tensor* losses, float grad_scale,
                     int64_t chunk_rows) {
  const int64_t N = inp.size(0), C = inp.size(1);
  if (N == 0) return {};
  const cudaStream_t stream = compute_stream();
  const Device dev = Device::cuda(context().device);
  const bool backward = dinp != nullptr;
  // A frozen head (LoRA) has no weight gradient: dinp only.
  const bool weight_grad = backward && dweight != nullptr && dweight->has_data();

  const DType ct = act_weight_compute_dtype(inp.dtype(), weight.dtype());
  Buffer w_holder;
  const void* w = device_as_dtype(weight.data(), weight.dtype(), ct, static_cast<size_t>(V * C), w_holder);

  // Logits dtype: the compute dtype, or f32 for 16-bit compute with ZT_CE_F32_LOGITS=1.
  static const bool f32_logits_env = [] {
    const char* v = env_value(EnvVar::CeF32Logits);
    return v != nullptr && v[0] == '1';
  }();
  const DType zdt = f32_logits_env ? DType::F32 : ct;
  const int64_t zs = static_cast<int64_t>(dtype_size(zdt));
  const bool z16 = zdt != DType::F32;

  // Chunk rows: the chunk's logits [R, ld] within the budget (dlogits go in place), the rows
  // spread evenly over the fewest chunks, R a multiple of 64; one chunk when that takes no
  // more memory than chunks plus the f32 dweight accumulator (see the top of the file).
  const LmHeadChunkPlan plan =
      lm_head_chunk_plan(N, V, C, zs, weight_grad && dweight->dtype() != DType::F32, chunk_rows);
  const int64_t ld = plan.ld, R = plan.rows;
  ZT_CHECK(R <= INT_MAX, "lm_head_cross_entropy: chunk of ", R, " rows is too large");
  ZT_CHECK(V <= INT_MAX / 2, "lm_head_cross_entropy: vocabulary of ", V, " is too large");  // in-row int indices

  // W_k = W with rows [V, ld) zero, [ld, C]: the logits and dinp products run over ld
  // vocabulary columns, so that every dimension cuBLASLt sees is a multiple of 64 (for an odd
  // V such as GPT-2's 50257 it otherwise picks align-1 kernels, about 6x slower). The padding
  // adds exact zeros: its logits are never read and its dlogits are written as 0. A copy only
  // when V % 64 != 0; the weight's own padding rows are never read.
  Buffer wk_holder;
  const void* wk = w;
  if (ld != V) {
    const size_t cs = dtype_size(ct), live = static_cast<size_t>(V * C) * cs;
    wk_holder = Buffer(static_cast<size_t>(ld * C) * cs, dev);
    if (wk_holder.bytes()) {
      if (live) ZT_CUDA_CHECK(cudaMemcpyAsync(wk_holder.data(), w, live, cudaMemcpyDeviceToDevice, stream));
      ZT_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(wk_holder.data()) + live, 0, wk_holder.bytes() - live, stream));
    }
    wk = wk_holder.data();
  }

  // Logits, then (backward) dlogits in place: at the same index when the logits have the
  // compute dtype, else (f32 logits, 16-bit compute) a 16-bit matrix over the same bytes with
  // row stride 2 ld (softmax_xent_kernel).
  Buffer z_buf(static_cast<size_t>(R * ld * zs), dev);
  void* z = z_buf.data();
  ZT_CHECK(reinterpret_cast<uintptr_t>(z) % 16 == 0, "lm_head_cross_entropy: unaligned logits scratch");
  const int64_t ldg = (ct == DType::F32 || z16) ? ld : 2 * ld;  // in elements of the compute dtype

  Buffer loss_buf;
  float* loss_d = nullptr;
  if (losses != nullptr) {
    loss_d = static_cast<float*>(losses->data());
  } else {
    loss_buf = Buffer(static_cast<size_t>(N) * sizeof(float), dev);
    loss_d = static_cast<float*>(loss_buf.data());
  }

  // dweight: straight (beta = 1) when f32 or a single chunk, else an f32 accumulator [ld, C]
  // (its rows [V, ld) take the padding's zeros and are not added to dweight).
  const bool dw_direct = weight_grad && !plan.f32_accumulator;
  Buffer dw_acc;
  if (weight_grad && !dw_direct) {
    dw_acc = Buffer(static_cast<size_t>(ld * C) * sizeof(float), dev);
    if (dw_acc.bytes()) ZT_CUDA_CHECK(cudaMemsetAsync(dw_acc.data(), 0, dw_acc.bytes(), stream));
  }

  const char* x_bytes = static_cast<const char*>(inp.data());
  const size_t x_es = dtype_size(inp.dtype());
  const int32_t* tg = static_cast<const int32_t*>(targets.data());
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t m = std::min(R, N - r0);
    Buffer x_holder;
    const void* x = device_as_dtype(x_bytes + static_cast<size_t>(r0 * C) * x_es, inp.dtype(), ct,
                                    static_cast<size_t>(m * C), x_holder);
    const MatrixRef xc{x, ct, m, C};
    // Z [m, ld] = x_c W_k^T (W_k stored [ld, C]: transposed).
    matmul(xc, MatrixRef{wk, ct, ld, C, 0, true}, z, zdt, ld, 1.0f, 0.0f);

    const unsigned blocks = static_cast<unsigned>(m);
    const int v_int = static_cast<int>(V), ld_int = static_cast<int>(ld);
    float* const losses_c = loss_d + r0;
    if (z16) {
      dispatch_float(ct, [&](auto tag) {
        using Z = decltype(tag);
        if constexpr (std::is_same_v<Z, float>) {
          ZT_CHECK(false, "lm_head_cross_entropy: 16-bit logits with f32 compute");
        } else {
          Z* zz = static_cast<Z*>(z);
          softmax_xent16_kernel<Z><<<blocks, kRowThreads, 0, stream>>>(zz, ld, tg + r0, v_int, ignore_index, losses_c,
                                                                       backward ? zz : nullptr, grad_scale);
          ZT_CUDA_CHECK_LAST();
        }
      });
      if (!backward) continue;
    } else if (!backward) {  // pass 1 only
      softmax_xent_kernel<float><<<blocks, kRowThreads, 0, stream>>>(static_cast<float*>(z), ld, tg + r0, v_int, ld_int,
                                                                     ignore_index, losses_c, nullptr, ld, 0.0f);
      ZT_CUDA_CHECK_LAST();
      continue;
    } else {
      dispatch_float(ct, [&](auto tag) {
        using G = decltype(tag);
        softmax_xent_kernel<G><<<blocks, kRowThreads, 0, stream>>>(static_cast<float*>(z), ld, tg + r0, v_int, ld_int,
                                                                   ignore_index, losses_c, reinterpret_cast<G*>(z), ldg,
                                                                   grad_scale);
        ZT_CUDA_CHECK_LAST();
      });
    }

    // dinp rows (=) = dlogits [m, ld] W_k [ld, C] (the padding adds zeros).
    char* dinp_rows = static_cast<char*>(dinp->data()) + static_cast<size_t>(r0 * C) * dtype_size(dinp->dtype());
    matmul_into(MatrixRef{z, ct, m, ld, ldg}, MatrixRef{wk, ct, ld, C}, dinp_rows, dinp->dtype(), 0,
                /*accumulate=*/false);
    // dW[0:V] (+=) dlogits^T [V, m] x_c [m, C] (the accumulator takes all ld rows).
    if (!weight_grad) {
      // dinp only.
    } else if (dw_direct) {
      matmul_into(MatrixRef{z, ct, m, V, ldg, true}, xc, dweight->data(), dweight->dtype(), 0,
                  /*accumulate=*/true);
    } else {
      matmul(MatrixRef{z, ct, m, ld, ldg, true}, xc, dw_acc.data(), DType::F32, C, 1.0f, 1.0f);
    }
  }
  if (weight_grad && !dw_direct)
    accumulate_f32_into(dweight->data(), dweight->dtype(), static_cast<const float*>(dw_acc.data()),
                        static_cast<size_t>(V * C), stream);

  Buffer sums_buf(sizeof(DeviceSums), dev);
  finish_kernel<<<1, kFinishThreads, 0, stream>>>(loss_d, tg, N, V, ignore_index,
                                                  static_cast<DeviceSums*>(sums_buf.data()));
  ZT_CUDA_CHECK_LAST();
  DeviceSums host{};
  ZT_CUDA_CHECK(cudaMemcpyAsync(&host, sums_buf.data(), sizeof(host), cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host.bad_row >= 0)
    ZT_THROW_INPUT("cross-entropy target ", host.bad_target, " at row ", host.bad_row,
                   " is outside the vocabulary [0, ", V, ") and is not ignore_index (", ignore_index,
                   "); check the tokenizer/vocab_size");
  return {host.loss_sum, static_cast<int64_t>(host.count)};
}

}  // namespace

CrossEntropySums lm_head_cross_entropy_forward(const Tensor& inp, const Tensor& weight, const Tensor& targets,
                                               int64_t vocab_size, int ignore_index, const Tensor& losses,
                                               int64_t chunk_rows) {
  const bool has_losses = losses.defined() && losses.data() != nullptr;
  return run(nullptr, nullptr, inp, weight, targets, vocab_size, ignore_index, has_losses ? &losses : nullptr, 0.0f,
             chunk_rows);
}

CrossEntropySums lm_head_cross_entropy_forward_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& inp,
                                                        const Tensor& weight, const Tensor& targets, int64_t vocab_size,
                                                        int ignore_index, float grad_scale, int64_t chunk_rows) {
  return run(&dinp, &dweight, inp, weight, targets, vocab_size, ignore_index, nullptr, grad_scale, chunk_rows);
}

}  // namespace zt::cuda
