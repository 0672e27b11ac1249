// Launch of the tensor-core attention forward (attention_tc_kernels.cuh describes the
// kernel; contract in attention_tc.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_tc.h"
#include "backend/cuda/attention_tc_kernels.cuh"
// After attention_tc_kernels.cuh, whose helpers it uses.
#include "backend/cuda/attention_tc_backward_kernels.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "core/env_vars.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

// Head dim D (0 when the packed row is not a whole number of heads).
int64_t head_dim(const Tensor& qkv, int n_q_heads, int n_kv_heads) {
  const int64_t heads = n_q_heads + 2 * static_cast<int64_t>(n_kv_heads);
  if (heads <= 0 || qkv.dim() != 3 || qkv.size(2) % heads != 0) return 0;
  return qkv.size(2) / heads;
}

// The packed samples' starts for TcDims::seg (null without them).
const int* segments_of(const Tensor& segment_starts) {
  return segment_starts.has_data() ? static_cast<const int*>(segment_starts.data()) : nullptr;
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

bool tc_dtype(DType dt) { return dt == DType::BF16 || dt == DType::F16; }

// Calls fn(E{}) with E the device element type of a 16-bit activation dtype.
template <class Fn>
void dispatch_elem(DType dt, Fn&& fn) {
  if (dt == DType::F16) return fn(__half{});
  return fn(__nv_bfloat16{});
}

// kPacked: the instantiation with sample starts (TcDims::seg); the other is the plain
// causal kernel (attention_tc_kernels.cuh says why two).
template <int kD, class E, bool kPacked>
void launch(const Tensor& out, const Tensor& lse, const Tensor& qkv, attn_tc::TcDims dm, int B, float scale) {
  constexpr size_t smem = attn_tc::TcTiles<kD>::kSmem;
  static const bool ready = [] {
    ZT_CUDA_CHECK(cudaFuncSetAttribute(attn_tc::attention_forward_tc_kernel<kD, E, kPacked>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)ready;
  const dim3 grid((dm.T + attn_tc::kRowsQ - 1) / attn_tc::kRowsQ, dm.Hq, B);
  attn_tc::attention_forward_tc_kernel<kD, E, kPacked><<<grid, attn_tc::kThreads, smem, compute_stream()>>>(
      static_cast<E*>(out.data()), static_cast<float*>(lse.data()), static_cast<const E*>(qkv.data()), dm,
      scale * attn_tc::kLog2e);
  ZT_CUDA_CHECK_LAST();
}

template <int kD, class E, bool kPacked>
void launch_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                     attn_tc::TcDims dm, int B, float scale) {
  using Tiles = attn_tc::BwdTiles<kD>;
  static const bool ready = [] {
    ZT_CUDA_CHECK(cudaFuncSetAttribute(attn_tc::attention_backward_dkdv_tc_kernel<kD, E, kPacked>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Tiles::kDkDvSmem)));
    ZT_CUDA_CHECK(cudaFuncSetAttribute(attn_tc::attention_backward_dq_tc_kernel<kD, E, kPacked>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Tiles::kDqSmem)));
    return true;
  }();
  (void)ready;
  const cudaStream_t stream = compute_stream();
  auto bf = [](const Tensor& t) { return static_cast<E*>(t.data()); };

  // delta = rowsum(dO * O) [B, Hq, T] f32, from the caching allocator (back to it on return:
  // stream-ordered, so only work queued after these kernels can reuse it).
  OwnedTensor delta({B, dm.Hq, dm.T}, DType::F32, Device::cuda());
  const int64_t rows = static_cast<int64_t>(B) * dm.T * dm.Hq;
  constexpr int kRowsPerBlock = attn_tc::kThreads / (kD / 8);
  attn_tc::attention_delta_tc_kernel<kD, E>
      <<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), attn_tc::kThreads, 0, stream>>>(
          delta.data<float>(), bf(dout), bf(out), dm, rows);
  ZT_CUDA_CHECK_LAST();

  const float scale_log2 = scale * attn_tc::kLog2e;
  const unsigned tiles = static_cast<unsigned>((dm.T + 63) / 64);
  attn_tc::attention_backward_dkdv_tc_kernel<kD, E, kPacked>
      <<<dim3(tiles, dm.Hkv, B), attn_tc::kThreads, Tiles::kDkDvSmem, stream>>>(
          bf(dqkv), bf(dout), bf(qkv), static_cast<const float*>(lse.data()), delta.data<float>(), dm, scale,
          scale_log2);
  ZT_CUDA_CHECK_LAST();
  attn_tc::attention_backward_dq_tc_kernel<kD, E, kPacked><<<dim3(tiles, dm.Hq, B), attn_tc::kThreads, Tiles::kDqSmem, stream>>>(
      bf(dqkv), bf(dout), bf(qkv), static_cast<const float*>(lse.data()), delta.data<float>(), dm, scale, scale_log2);
  ZT_CUDA_CHECK_LAST();
}

}  // namespace

bool attention_tensor_core_enabled() {
  static const bool enabled = [] { return !env_equals(EnvVar::AttentionTc, "0"); }();
  return enabled;
}

bool attention_forward_tensor_core_supports(const Tensor& out, const Tensor& qkv, int n_q_heads, int n_kv_heads) {
  const int64_t D = head_dim(qkv, n_q_heads, n_kv_heads);
  return tc_dtype(qkv.dtype()) && out.dtype() == qkv.dtype() && (D == 64 || D == 128) && n_kv_heads > 0 &&
         n_q_heads % n_kv_heads == 0 && qkv.size(0) <= 65535 && n_q_heads <= 65535 && qkv.size(1) <= INT_MAX / 2 &&
         aligned(qkv.data(), 16) && aligned(out.data(), 4);
}

bool attention_backward_tensor_core_supports(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                             const Tensor& out, int n_q_heads, int n_kv_heads) {
  return attention_forward_tensor_core_supports(out, qkv, n_q_heads, n_kv_heads) && dqkv.dtype() == qkv.dtype() &&
         dout.dtype() == qkv.dtype() && aligned(dqkv.data(), 4) && aligned(dout.data(), 16) && aligned(out.data(), 16);
}

void attention_backward_tensor_core(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                    const Tensor& lse, int n_q_heads, int n_kv_heads, float scale,
                                    const Tensor& segment_starts) {
  const char* op = "cuda attention_backward_tensor_core";
  if (!attention_backward_tensor_core_supports(dqkv, dout, qkv, out, n_q_heads, n_kv_heads))
    ZT_THROW_UNSUPPORTED(op,
                         ": needs bf16 or f16 tensors (one dtype), head dim 64 or 128, 16-byte aligned qkv/dout/out, "
                         "B and Hq <= 65535");
  const int B = static_cast<int>(qkv.size(0));
  const attn_tc::TcDims dm{static_cast<int>(qkv.size(1)), n_q_heads, n_kv_heads, segments_of(segment_starts)};
  if (B == 0 || dm.T == 0) return;
  const bool d64 = head_dim(qkv, n_q_heads, n_kv_heads) == 64;
  dispatch_elem(qkv.dtype(), [&](auto e) {
    using E = decltype(e);
    if (d64)
      dm.seg ? launch_backward<64, E, true>(dqkv, dout, qkv, out, lse, dm, B, scale)
             : launch_backward<64, E, false>(dqkv, dout, qkv, out, lse, dm, B, scale);
    else
      dm.seg ? launch_backward<128, E, true>(dqkv, dout, qkv, out, lse, dm, B, scale)
             : launch_backward<128, E, false>(dqkv, dout, qkv, out, lse, dm, B, scale);
  });
}

void attention_forward_tensor_core(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads,
                                   int n_kv_heads, float scale, const Tensor& segment_starts) {
  const char* op = "cuda attention_forward_tensor_core";
  if (!attention_forward_tensor_core_supports(out, qkv, n_q_heads, n_kv_heads))
    ZT_THROW_UNSUPPORTED(op,
                         ": needs bf16 or f16 activations, head dim 64 or 128, 16-byte aligned qkv, B and Hq <= 65535");
  const int B = static_cast<int>(qkv.size(0));
  const attn_tc::TcDims dm{static_cast<int>(qkv.size(1)), n_q_heads, n_kv_heads, segments_of(segment_starts)};
  if (B == 0 || dm.T == 0) return;
  const bool d64 = head_dim(qkv, n_q_heads, n_kv_heads) == 64;
  dispatch_elem(qkv.dtype(), [&](auto e) {
    using E = decltype(e);
    if (d64)
      dm.seg ? launch<64, E, true>(out, lse, qkv, dm, B, scale) : launch<64, E, false>(out, lse, qkv, dm, B, scale);
    else
      dm.seg ? launch<128, E, true>(out, lse, qkv, dm, B, scale) : launch<128, E, false>(out, lse, qkv, dm, B, scale);
  });
}

}  // namespace zt::cuda
