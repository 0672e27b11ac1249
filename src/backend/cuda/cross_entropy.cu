// CUDA LM head + softmax cross-entropy (see cross_entropy_ops.h).
//
// Accumulation rule: dinp (=), dweight (+=, rows < V only), losses (=).
//
// Per chunk of R rows (R from a 256 MiB budget for the chunk's scratch, a multiple of 64):
//   1. x_c = the chunk's rows of inp, in the compute dtype (act_weight_compute_dtype: the
//      weight's dtype for f32 activations, f32 when a bf16 activation meets an f32/f16
//      weight); W = weight rows [0, V) in that dtype (the weight itself but for that case).
//   2. Z [R, V] f32 (row stride ld = V rounded up to 64) = x_c W^T: one cuBLASLt matmul,
//      CUBLAS_COMPUTE_32F, f32 output for every input dtype. Padding rows of the weight
//      (>= V) are never read.
//   3. One block per row: max, sum of exp (f32, fixed-order block reductions), loss =
//      logsumexp - z[target] into losses[row] (0 for ignored rows); for the backward,
//      dlogits = grad_scale (softmax - onehot) (0 for ignored rows), written in place into
//      Z for f32 compute, else into a [R, ld] scratch of the compute dtype (the matmul
//      inputs must share a dtype).
//   4. dinp rows (=) = dlogits W (beta = 0); dW[0:V] (+=) dlogits^T x_c with beta = 1:
//      straight into dweight when it is f32 or there is one chunk, else into an f32 [V, C]
//      accumulator (zeroed once) that is added to dweight after the last chunk with one
//      rounding (as the CPU backend does).
// At the end one block sums the per-row losses in double in a fixed order (deterministic),
// counts the rows and finds the first invalid target; one small copy brings that to the host.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cross_entropy_ops.h"
#include "backend/cuda/matmul.h"
#include "core/dtype_dispatch.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kRowThreads = 512;        // one block per row of a chunk
constexpr int kFinishThreads = 1024;    // the final reduction: one block (a power of two)
constexpr int64_t kLdAlign = 64;        // row stride of the chunk's logits, in elements
constexpr int64_t kChunkBudgetBytes = int64_t{256} << 20;

template <class T>
__device__ __forceinline__ T from_float(float f);
template <>
__device__ __forceinline__ float from_float<float>(float f) {
  return f;
}
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

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide reductions (blockDim.x a multiple of 32); every thread gets the result. The
// order of the additions is fixed, so results do not vary from run to run.
__device__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? part[lane] : -INFINITY);
}
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? part[lane] : 0.0f);
}

// One block per chunk row. z: logits [rows, ldz] f32; g: dlogits [rows, ldg] (may be z
// itself for G = float: each element is read before the same thread overwrites it, and every
// read of the max/sum passes ends at the block reductions' barriers), or null (forward only).
template <class G>
__global__ void __launch_bounds__(kRowThreads)
    softmax_xent_kernel(const float* z, int64_t ldz, const int32_t* __restrict__ targets, int64_t V,
                        int ignore_index, float* __restrict__ losses, G* g, int64_t ldg, float grad_scale) {
  const int64_t row = blockIdx.x;
  const float* zr = z + row * ldz;
  G* gr = g ? g + row * ldg : nullptr;
  const int32_t t = targets[row];
  if (t == ignore_index || t < 0 || t >= V) {  // ignored (or invalid: reported by finish_kernel)
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (gr)
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) gr[j] = from_float<G>(0.0f);
    return;
  }
  const float zt = zr[t];
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, zr[j]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) sum += expf(zr[j] - mx);
  sum = block_sum(sum);
  const float lse = mx + logf(sum);  // a NaN logit makes sum, lse and the loss NaN
  if (threadIdx.x == 0) losses[row] = lse - zt;
  if (gr) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const float p = expf(zr[j] - lse);
      gr[j] = from_float<G>(grad_scale * (j == t ? p - 1.0f : p));
    }
  }
}

struct DeviceSums {
  double loss_sum;
  long long count;
  long long bad_row;     // first row with a target outside [0, V) that is not ignore_index; -1: none
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

  const DType ct = act_weight_compute_dtype(inp.dtype(), weight.dtype());
  const size_t cs = dtype_size(ct);
  Buffer w_holder;
  const void* w = device_as_dtype(weight.data(), weight.dtype(), ct, static_cast<size_t>(V * C), w_holder);

  // Chunk rows: the chunk's logits (f32), dlogits (when not in place) and converted inputs
  // within the budget.
  const int64_t ld = (V + kLdAlign - 1) / kLdAlign * kLdAlign;
  const bool separate_g = backward && ct != DType::F32;
  const int64_t per_row = ld * 4 + (separate_g ? ld * static_cast<int64_t>(cs) : 0) +
                          (inp.dtype() != ct ? C * static_cast<int64_t>(cs) : 0);
  int64_t R = chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, kChunkBudgetBytes / per_row);
  if (chunk_rows <= 0 && R >= 64) R = R / 64 * 64;
  R = std::min(R, N);
  ZT_CHECK(R <= INT_MAX, "lm_head_cross_entropy: chunk of ", R, " rows is too large");
  const int64_t chunks = (N + R - 1) / R;

  Buffer z_buf(static_cast<size_t>(R * ld) * sizeof(float), dev);
  float* z = static_cast<float*>(z_buf.data());
  Buffer g_buf;
  if (separate_g) g_buf = Buffer(static_cast<size_t>(R * ld) * cs, dev);
  void* g = backward ? (separate_g ? g_buf.data() : static_cast<void*>(z)) : nullptr;

  Buffer loss_buf;
  float* loss_d = nullptr;
  if (losses != nullptr) {
    loss_d = static_cast<float*>(losses->data());
  } else {
    loss_buf = Buffer(static_cast<size_t>(N) * sizeof(float), dev);
    loss_d = static_cast<float*>(loss_buf.data());
  }

  // dweight: straight (beta = 1) when f32 or a single chunk, else an f32 accumulator.
  const bool dw_direct = backward && (dweight->dtype() == DType::F32 || chunks == 1);
  Buffer dw_acc;
  if (backward && !dw_direct) {
    dw_acc = Buffer(static_cast<size_t>(V * C) * sizeof(float), dev);
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
    // Z [m, V] = x_c W^T (W stored [V, C]: transposed).
    matmul(xc, MatrixRef{w, ct, V, C, 0, true}, z, DType::F32, ld, 1.0f, 0.0f);

    const unsigned blocks = static_cast<unsigned>(m);
    if (!backward) {
      softmax_xent_kernel<float><<<blocks, kRowThreads, 0, stream>>>(z, ld, tg + r0, V, ignore_index, loss_d + r0,
                                                                     nullptr, ld, 0.0f);
      ZT_CUDA_CHECK_LAST();
      continue;
    }
    dispatch_float(ct, [&](auto tag) {
      using G = decltype(tag);
      softmax_xent_kernel<G><<<blocks, kRowThreads, 0, stream>>>(z, ld, tg + r0, V, ignore_index, loss_d + r0,
                                                                 static_cast<G*>(g), ld, grad_scale);
      ZT_CUDA_CHECK_LAST();
    });

    // dinp rows (=) = dlogits [m, V] W [V, C].
    char* dinp_rows = static_cast<char*>(dinp->data()) + static_cast<size_t>(r0 * C) * dtype_size(dinp->dtype());
    matmul_into(MatrixRef{g, ct, m, V, ld}, MatrixRef{w, ct, V, C}, dinp_rows, dinp->dtype(), 0,
                /*accumulate=*/false);
    // dW[0:V] (+=) dlogits^T [V, m] x_c [m, C].
    const MatrixRef g_t{g, ct, m, V, ld, true};
    if (dw_direct) {
      matmul_into(g_t, xc, dweight->data(), dweight->dtype(), 0, /*accumulate=*/true);
    } else {
      matmul(g_t, xc, dw_acc.data(), DType::F32, C, 1.0f, 1.0f);
    }
  }
  if (backward && !dw_direct)
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

CrossEntropySums lm_head_cross_entropy_forward_backward(const Tensor& dinp, const Tensor& dweight,
                                                        const Tensor& inp, const Tensor& weight,
                                                        const Tensor& targets, int64_t vocab_size,
                                                        int ignore_index, float grad_scale, int64_t chunk_rows) {
  return run(&dinp, &dweight, inp, weight, targets, vocab_size, ignore_index, nullptr, grad_scale, chunk_rows);
}

}  // namespace zt::cuda
