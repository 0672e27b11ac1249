// CUDA causal GQA self-attention: launches of the kernels in attention_kernels.cuh (which
// describes the algorithm); contract in ops/attention.h, kernels listed in backend/attention_kernels.h.
//
// Accumulation rule: forward overwrites out and lse (=); backward overwrites dqkv (=).
//
// Kernels are instantiated for head-dim buckets kD in {32, 64, 128} (D <= kD, the rest is
// zero padding) and for f32, bf16 and f16 activations. The backward runs three kernels on the
// compute stream: delta = rowsum(dO * O) into an f32 [B, Hq, T] scratch from the caching
// allocator, then dK/dV (one block per key tile) and dQ (one block per query tile); each
// writes its own part of dqkv, so the result is deterministic and needs no zero fill.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_kernels.cuh"
#include "backend/attention_kernels.h"
#include "backend/cuda/attention_tc.h"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/host_dispatch.cuh"
#include "core/error.h"

namespace zt::cuda {
namespace {

using attn::Dims;
using attn::kThreads;
using attn::Tiles;

// Calls fn(std::integral_constant<int, kD>) with kD the head-dim bucket of D.
template <class Fn>
void dispatch_head_dim(const char* op, int D, Fn&& fn) {
  if (D <= 32) return fn(std::integral_constant<int, 32>{});
  if (D <= 64) return fn(std::integral_constant<int, 64>{});
  if (D <= kAttentionMaxHeadDim) return fn(std::integral_constant<int, 128>{});
  ZT_THROW_UNSUPPORTED(op, ": head dim ", D, " is not supported by the CUDA attention kernels (at most ",
                       kAttentionMaxHeadDim, "); use a model with head_dim <= ", kAttentionMaxHeadDim,
                       " or --device cpu");
}

// Kernels that use more than 48 KiB of dynamic shared memory must say so, once per kernel.
template <class Kernel>
bool allow_shared_memory(Kernel* kernel, size_t bytes) {
  ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return true;
}

int tiles(int n, int tile) { return (n + tile - 1) / tile; }

// Sizes shared by forward and backward, with the packed samples' starts when defined; checks
// what the grid can hold.
Dims dims_of(const char* op, const Tensor& qkv, int n_q_heads, int n_kv_heads,
             const Tensor& segment_starts = Tensor()) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  const int64_t D = qkv.size(2) / (n_q_heads + 2 * static_cast<int64_t>(n_kv_heads));
  ZT_CHECK(T <= INT_MAX / 2, op, ": sequence length ", T, " too long");
  if (B > 65535 || n_q_heads > 65535)
    ZT_THROW_UNSUPPORTED(op, ": CUDA attention supports at most 65535 sequences and heads per call, got B=", B,
                         " Hq=", n_q_heads);
  Dims dm{static_cast<int>(T), n_q_heads, n_kv_heads, static_cast<int>(D)};
  if (segment_starts.has_data()) dm.seg = static_cast<const int*>(segment_starts.data());
  return dm;
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

template <int kD, class T>
void launch_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, Dims dm, int B, float scale) {
  constexpr size_t smem = Tiles<kD>::kForwardSmem;
  static const bool ready = allow_shared_memory(attn::attention_forward_kernel<kD, T>, smem);
  (void)ready;
  const dim3 grid(tiles(dm.T, Tiles<kD>::kQ), dm.Hq, B);
  attn::attention_forward_kernel<kD, T><<<grid, kThreads, smem, compute_stream()>>>(
      ptr<T>(out), ptr<float>(lse), ptr<const T>(qkv), dm, scale * attn::kLog2e);
  ZT_CUDA_CHECK_LAST();
}

template <int kD, class T>
void launch_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                     Dims dm, int B, float scale) {
  cudaStream_t stream = compute_stream();

  // delta = rowsum(dO * O): one warp per (b, t, h), 8 warps per block.
  OwnedTensor delta({B, dm.Hq, dm.T}, DType::F32, Device::cuda());
  const int64_t rows = static_cast<int64_t>(B) * dm.T * dm.Hq;
  constexpr int kDeltaWarps = 8;
  const int64_t delta_blocks = (rows + kDeltaWarps - 1) / kDeltaWarps;
  attn::attention_delta_kernel<T><<<static_cast<unsigned>(delta_blocks), kDeltaWarps * 32, 0, stream>>>(
      delta.data<float>(), ptr<const T>(dout), ptr<const T>(out), dm, rows);
  ZT_CUDA_CHECK_LAST();

  const float scale_log2 = scale * attn::kLog2e;
  {
    constexpr size_t smem = Tiles<kD>::kDkDvSmem;
    static const bool ready = allow_shared_memory(attn::attention_backward_dkdv_kernel<kD, T>, smem);
    (void)ready;
    const dim3 grid(tiles(dm.T, Tiles<kD>::kK), dm.Hkv, B);
    attn::attention_backward_dkdv_kernel<kD, T>
        <<<grid, kThreads, smem, stream>>>(ptr<T>(dqkv), ptr<const T>(dout), ptr<const T>(qkv), ptr<const float>(lse),
                                           delta.data<float>(), dm, scale, scale_log2);
    ZT_CUDA_CHECK_LAST();
  }
  {
    constexpr size_t smem = Tiles<kD>::kDqSmem;
    static const bool ready = allow_shared_memory(attn::attention_backward_dq_kernel<kD, T>, smem);
    (void)ready;
    const dim3 grid(tiles(dm.T, Tiles<kD>::kQ), dm.Hq, B);
    attn::attention_backward_dq_kernel<kD, T>
        <<<grid, kThreads, smem, stream>>>(ptr<T>(dqkv), ptr<const T>(dout), ptr<const T>(qkv), ptr<const float>(lse),
                                           delta.data<float>(), dm, scale, scale_log2);
    ZT_CUDA_CHECK_LAST();
  }
  // `delta` goes back to the cache here; the stream-ordered allocator hands it out again only
  // to work queued after these kernels.
}

}  // namespace

void attention_forward_fma(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                           float scale, const Tensor& segment_starts) {
  const char* op = "cuda attention_forward";
  const Dims dm = dims_of(op, qkv, n_q_heads, n_kv_heads, segment_starts);
  const int B = static_cast<int>(qkv.size(0));
  if (B == 0 || dm.T == 0) return;
  dispatch_activation(op, qkv.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_head_dim(op, dm.D, [&](auto kd) { launch_forward<decltype(kd)::value, T>(out, lse, qkv, dm, B, scale); });
  });
}

void attention_backward_fma(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse, int n_q_heads, int n_kv_heads, float scale,
                            const Tensor& segment_starts) {
  const char* op = "cuda attention_backward";
  const Dims dm = dims_of(op, qkv, n_q_heads, n_kv_heads, segment_starts);
  const int B = static_cast<int>(qkv.size(0));
  if (B == 0 || dm.T == 0) return;
  dispatch_activation(op, qkv.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_head_dim(
        op, dm.D, [&](auto kd) { launch_backward<decltype(kd)::value, T>(dqkv, dout, qkv, out, lse, dm, B, scale); });
  });
}

// Tensor cores (attention_tc.h) for bf16 and f16 with head dim 64 or 128 unless ZT_ATTENTION_TC=0;
// the f32-FMA kernels otherwise.
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                       float scale, const Tensor& segment_starts) {
  dims_of("cuda attention_forward", qkv, n_q_heads, n_kv_heads);  // the grid limits, checked once
  if (attention_tensor_core_enabled() && attention_forward_tensor_core_supports(out, qkv, n_q_heads, n_kv_heads))
    return attention_forward_tensor_core(out, lse, qkv, n_q_heads, n_kv_heads, scale, segment_starts);
  attention_forward_fma(out, lse, qkv, n_q_heads, n_kv_heads, scale, segment_starts);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_q_heads, int n_kv_heads, float scale, const Tensor& segment_starts) {
  dims_of("cuda attention_backward", qkv, n_q_heads, n_kv_heads);
  if (attention_tensor_core_enabled() &&
      attention_backward_tensor_core_supports(dqkv, dout, qkv, out, n_q_heads, n_kv_heads))
    return attention_backward_tensor_core(dqkv, dout, qkv, out, lse, n_q_heads, n_kv_heads, scale, segment_starts);
  attention_backward_fma(dqkv, dout, qkv, out, lse, n_q_heads, n_kv_heads, scale, segment_starts);
}

}  // namespace zt::cuda
