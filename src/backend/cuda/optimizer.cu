// Optimizer updates on the GPU; see optimizer_ops.h.
//
// Each update is one kernel over the flat range. The element-wise arithmetic is that of
// backend/cpu/optimizer.cpp (itself PyTorch's single-tensor updates) operation by operation,
// and the scalar factors (bias corrections, decay factors) are computed on the host in double
// with the same expressions, so f32 results agree with the CPU to a few ulp (the compilers
// may contract different multiply-adds into FMAs). sqrtf and '/' are IEEE-rounded (no fast
// math). 16-bit parameters are updated through their f32 master and then rounded (nearest
// even) into the parameter.
//
// Shape of the work: a thread handles chunks of 8 consecutive elements in a grid-stride
// loop of 256-thread blocks; when every pointer is 16-byte aligned (the flat buffers always
// are) each stream moves in 16-byte vectors: one for 16-bit params/grads, two for the f32
// master, gradient and states. Misaligned views and the last partial chunk go element by
// element.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/optimizer_ops.h"
#include "core/dtype_dispatch.h"

namespace zt::cuda {
namespace {

// ---- chunked element access -----------------------------------------------------------------
// The same block opens elementwise.cu, activation.cu, dropout.cu and optimizer.cu (each .cu
// is compiled alone); a shared header under backend/cuda/device/ is where it would go.

constexpr int kThreads = 256;
constexpr int kChunk = 8;              // elements per thread step: 16 bytes of 16-bit values
constexpr int64_t kMaxBlocks = 8192;   // more work than this grid covers is grid-strided

// f32 value of a stored element, and the stored element for an f32 value: bf16 rounds as
// core/dtype.h's to_bf16 bit for bit (nearest even, NaN stays a quiet NaN), f16 as
// __float2half_rn (nearest even, as the CPU's F16C conversion).
template <class T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
  } else {
    static_assert(std::is_same_v<T, f16>);
    return __half2float(__ushort_as_half(v.bits));
  }
}
template <class T>
__device__ __forceinline__ T from_float(float f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else if constexpr (std::is_same_v<T, bf16>) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16{static_cast<uint16_t>(u >> 16)};
  } else {
    static_assert(std::is_same_v<T, f16>);
    return f16{__half_as_ushort(__float2half_rn(f))};
  }
}

__device__ __forceinline__ void load_vec(const float* p, float (&f)[kChunk]) {
  const float4* q = reinterpret_cast<const float4*>(p);
  const float4 a = q[0], b = q[1];
  f[0] = a.x;
  f[1] = a.y;
  f[2] = a.z;
  f[3] = a.w;
  f[4] = b.x;
  f[5] = b.y;
  f[6] = b.z;
  f[7] = b.w;
}
template <class H>  // bf16 or f16: eight 16-bit values in one 16-byte load, element 0 in the low half
__device__ __forceinline__ void load_vec(const H* p, float (&f)[kChunk]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = to_float(H{static_cast<uint16_t>(w[k])});
    f[2 * k + 1] = to_float(H{static_cast<uint16_t>(w[k] >> 16)});
  }
}
__device__ __forceinline__ void store_vec(float* p, const float (&f)[kChunk]) {
  float4* q = reinterpret_cast<float4*>(p);
  q[0] = make_float4(f[0], f[1], f[2], f[3]);
  q[1] = make_float4(f[4], f[5], f[6], f[7]);
}
template <class H>
__device__ __forceinline__ void store_vec(H* p, const float (&f)[kChunk]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = from_float<H>(f[2 * k]).bits | (static_cast<uint32_t>(from_float<H>(f[2 * k + 1]).bits) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// Elements [i, i + count) of p as f32; lanes from count on read as 0 (and are never stored).
// vec: the chunk is full and p is 16-byte aligned.
template <class T>
__device__ __forceinline__ void load_chunk(const T* p, int64_t i, int count, bool vec, float (&f)[kChunk]) {
  if (vec) {
    load_vec(p + i, f);
    return;
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k) f[k] = k < count ? to_float(p[i + k]) : 0.0f;
}
template <class T>
__device__ __forceinline__ void store_chunk(T* p, int64_t i, int count, bool vec, const float (&f)[kChunk]) {
  if (vec) {
    store_vec(p + i, f);
    return;
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k)
    if (k < count) p[i + k] = from_float<T>(f[k]);
}

__host__ __device__ __forceinline__ int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// op(i, count, vec) for every chunk [i, i + count) of [0, n), grid-stride.
template <class Op>
__global__ void chunked_kernel(Op op, int64_t n, bool aligned) {
  const int64_t chunks = chunks_of(n);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const int64_t i = c * kChunk;
    const int count = static_cast<int>(n - i < kChunk ? n - i : kChunk);
    op(i, count, aligned && count == kChunk);
  }
}

// Blocks for `chunks` thread steps: one step per thread, at most max_blocks (then grid-stride).
unsigned grid_for(int64_t chunks, int64_t max_blocks = kMaxBlocks) {
  return static_cast<unsigned>(std::min<int64_t>((chunks + kThreads - 1) / kThreads, max_blocks));
}

template <class Op>
void launch_chunked(const Op& op, int64_t n, bool aligned) {
  if (n <= 0) return;
  chunked_kernel<<<grid_for(chunks_of(n)), kThreads, 0, compute_stream()>>>(op, n, aligned);
  ZT_CUDA_CHECK_LAST();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- the updates --------------------------------------------------------------------------

// The f32 value being optimised: the master copy when there is one, else the parameter.
template <class P>
__device__ __forceinline__ void load_weights(const P* param, const float* master, int64_t i, int count, bool vec,
                                             float (&w)[kChunk]) {
  if (master) load_chunk(master, i, count, vec, w);
  else load_chunk(param, i, count, vec, w);
}
template <class P>
__device__ __forceinline__ void store_weights(P* param, float* master, int64_t i, int count, bool vec,
                                              const float (&w)[kChunk]) {
  if (master) store_chunk(master, i, count, vec, w);
  store_chunk(param, i, count, vec, w);
}

template <class P, class G>
struct AdamWOp {
  P* param;
  float* master;
  const G* grad;
  float* m;
  float* v;
  float b1, b2, eps, grad_scale;
  float step_size;  // lr / bias_correction1
  float bc2_sqrt;   // sqrt(bias_correction2)
  float decay;      // 1 - lr*wd (decoupled) or 1
  float l2;         // wd (L2) or 0
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float p[kChunk], g[kChunk], mi[kChunk], vi[kChunk];
    load_weights(param, master, i, count, vec, p);
    load_chunk(grad, i, count, vec, g);
    load_chunk(m, i, count, vec, mi);
    load_chunk(v, i, count, vec, vi);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      float gk = g[k] * grad_scale;
      if (l2 != 0.0f) gk += l2 * p[k];
      p[k] *= decay;
      mi[k] = b1 * mi[k] + (1.0f - b1) * gk;
      vi[k] = b2 * vi[k] + (1.0f - b2) * gk * gk;
      p[k] -= step_size * (mi[k] / (sqrtf(vi[k]) / bc2_sqrt + eps));
    }
    store_chunk(m, i, count, vec, mi);
    store_chunk(v, i, count, vec, vi);
    store_weights(param, master, i, count, vec, p);
  }
};

template <class P, class G>
struct SgdOp {
  P* param;
  float* master;
  const G* grad;
  float* buf;  // nullptr without momentum
  float lr, momentum, keep, wd, grad_scale;  // keep = 1 - dampening
  bool nesterov, fresh;                      // fresh: the buffer holds nothing yet
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float p[kChunk], d[kChunk], b[kChunk];
    load_weights(param, master, i, count, vec, p);
    load_chunk(grad, i, count, vec, d);
    if (buf && !fresh) load_chunk(buf, i, count, vec, b);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      d[k] *= grad_scale;
      if (wd != 0.0f) d[k] += wd * p[k];
      if (buf) {
        b[k] = fresh ? d[k] : momentum * b[k] + keep * d[k];
        d[k] = nesterov ? d[k] + momentum * b[k] : b[k];
      }
      p[k] -= lr * d[k];
    }
    if (buf) store_chunk(buf, i, count, vec, b);
    store_weights(param, master, i, count, vec, p);
  }
};

// sign(0) = 0, as the CPU kernel.
template <class P, class G>
struct LionOp {
  P* param;
  float* master;
  const G* grad;
  float* m;
  float lr, b1, b2, decay, grad_scale;  // decay = 1 - lr*wd
  __device__ void operator()(int64_t i, int count, bool vec) const {
    float p[kChunk], g[kChunk], mi[kChunk];
    load_weights(param, master, i, count, vec, p);
    load_chunk(grad, i, count, vec, g);
    load_chunk(m, i, count, vec, mi);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float gk = g[k] * grad_scale;
      p[k] *= decay;
      const float c = b1 * mi[k] + (1.0f - b1) * gk;
      const float s = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
      p[k] -= lr * s;
      mi[k] = b2 * mi[k] + (1.0f - b2) * gk;
    }
    store_chunk(m, i, count, vec, mi);
    store_weights(param, master, i, count, vec, p);
  }
};

float* f32_or_null(const Tensor& t) { return static_cast<float*>(t.data()); }  // undefined: nullptr

bool all_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;  // nullptr counts as aligned
  return true;
}

// Calls fn(P*, const G*) with the parameter and gradient pointers cast to their dtypes.
template <class Fn>
void dispatch_param_grad(const Tensor& param, const Tensor& grad, Fn&& fn) {
  dispatch_float(param.dtype(), [&](auto ptag) {
    dispatch_float(grad.dtype(), [&](auto gtag) {
      using P = decltype(ptag);
      using G = decltype(gtag);
      fn(static_cast<P*>(param.data()), static_cast<const G*>(grad.data()));
    });
  });
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h) {
  // Host scalars exactly as backend/cpu/optimizer.cpp computes them.
  const bool bc = h.bias_correction == BiasCorrection::On;
  const double bc1 = bc ? 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step)) : 1.0;
  const double bc2 = bc ? 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step)) : 1.0;
  const float step_size = static_cast<float>(h.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const bool decoupled = h.decay == AdamDecay::Decoupled;
  const float decay = decoupled ? static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay) : 1.0f;
  const float l2 = decoupled ? 0.0f : h.weight_decay;
  const bool aligned = all_aligned({param.data(), master.data(), grad.data(), m.data(), v.data()});
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    using P = std::remove_pointer_t<decltype(p)>;
    using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
    launch_chunked(AdamWOp<P, G>{p, f32_or_null(master), g, f32_or_null(m), f32_or_null(v), h.beta1, h.beta2, h.eps,
                                 h.grad_scale, step_size, bc2_sqrt, decay, l2},
                   param.numel(), aligned);
  });
}

void sgd_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
              const SgdHyper& h) {
  const bool aligned = all_aligned({param.data(), master.data(), grad.data(), momentum_buf.data()});
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    using P = std::remove_pointer_t<decltype(p)>;
    using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
    launch_chunked(SgdOp<P, G>{p, f32_or_null(master), g, f32_or_null(momentum_buf), h.lr, h.momentum,
                               1.0f - h.dampening, h.weight_decay, h.grad_scale, h.nesterov == Nesterov::On,
                               h.buffer == MomentumBuffer::Empty},
                   param.numel(), aligned);
  });
}

void lion_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h) {
  const float decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  const bool aligned = all_aligned({param.data(), master.data(), grad.data(), m.data()});
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    using P = std::remove_pointer_t<decltype(p)>;
    using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
    launch_chunked(LionOp<P, G>{p, f32_or_null(master), g, f32_or_null(m), h.lr, h.beta1, h.beta2, decay,
                                h.grad_scale},
                   param.numel(), aligned);
  });
}

}  // namespace zt::cuda
