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
#include "backend/cuda/device/chunked.cuh"
#include "backend/cuda/optimizer_ops.h"
#include "core/dtype_dispatch.h"

namespace zt::cuda {
namespace {

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
