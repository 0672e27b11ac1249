// Optimizer updates over flat f32 state, following PyTorch's single-tensor
// implementations operation by operation (same rounding points, so parity tests hold at
// ~1e-7). Scalar factors are computed in double as PyTorch does with Python floats.
// Parameters may be stored in bf16/f16 with an f32 master, or in bf16 with bf16 state and
// no master (S = bf16: state loaded as f32, updated as the f32 path, stored rounded; with
// S = float load_f32 / store_as are the identity, so the f32-state path is unchanged).
#include "backend/optimizer_kernels.h"
#include "core/dtype_dispatch.h"
#include "backend/cpu/optimizer_raw.h"

#include <cmath>

namespace zt::cpu {
namespace {
// Ranges below this run on one thread: thread start-up costs more than the update.
constexpr int64_t kParallelMin = 32768;
}  // namespace

template <class P, class G, class S>
void adamw_step(P* param, float* master, const G* grad, S* m, S* v, int64_t n, const AdamWHyper& h) {
  const float b1 = h.beta1, b2 = h.beta2;
  const bool bc = h.bias_correction == BiasCorrection::On;
  const double bc1 = bc ? 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(h.step)) : 1.0;
  const double bc2 = bc ? 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(h.step)) : 1.0;
  const float step_size = static_cast<float>(h.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const bool decoupled = h.decay == AdamDecay::Decoupled;
  const float decay = decoupled ? static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay) : 1.0f;
  const float l2 = decoupled ? 0.0f : h.weight_decay;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float p = master ? master[i] : load_f32(param[i]);
    float g = load_f32(grad[i]) * h.grad_scale;
    if (l2 != 0.0f) g += l2 * p;
    p *= decay;
    const float mi = b1 * load_f32(m[i]) + (1.0f - b1) * g;
    const float vi = b2 * load_f32(v[i]) + (1.0f - b2) * g * g;
    m[i] = store_as<S>(mi);
    v[i] = store_as<S>(vi);
    p -= step_size * (mi / (std::sqrt(vi) / bc2_sqrt + h.eps));
    if (master) master[i] = p;
    param[i] = store_as<P>(p);
  }
}

// torch.optim.SGD: d = g + wd*p; buf = d on the first step, else momentum*buf + (1-dampening)*d;
// d = nesterov ? d + momentum*buf : buf; p -= lr*d.
template <class P, class G, class S>
void sgd_step(P* param, float* master, const G* grad, S* buf, int64_t n, const SgdHyper& h) {
  const float mu = h.momentum, keep = 1.0f - h.dampening, wd = h.weight_decay, lr = h.lr;
  const bool nesterov = h.nesterov == Nesterov::On, fresh = h.buffer == MomentumBuffer::Empty;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float p = master ? master[i] : load_f32(param[i]);
    float d = load_f32(grad[i]) * h.grad_scale;
    if (wd != 0.0f) d += wd * p;
    if (buf) {
      const float b = fresh ? d : mu * load_f32(buf[i]) + keep * d;
      buf[i] = store_as<S>(b);
      d = nesterov ? d + mu * b : b;
    }
    p -= lr * d;
    if (master) master[i] = p;
    param[i] = store_as<P>(p);
  }
}

// Lion (Chen et al. 2023, as lucidrains/lion-pytorch and DeepSpeed's FusedLion):
// p *= 1 - lr*wd; p -= lr * sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g. sign(0) = 0.
template <class P, class G, class S>
void lion_step(P* param, float* master, const G* grad, S* m, int64_t n, const LionHyper& h) {
  const float b1 = h.beta1, b2 = h.beta2, lr = h.lr;
  const float decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float p = master ? master[i] : load_f32(param[i]);
    const float g = load_f32(grad[i]) * h.grad_scale;
    p *= decay;
    const float mi = load_f32(m[i]);
    const float c = b1 * mi + (1.0f - b1) * g;
    const float s = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    p -= lr * s;
    m[i] = store_as<S>(b2 * mi + (1.0f - b2) * g);
    if (master) master[i] = p;
    param[i] = store_as<P>(p);
  }
}

// Segmented updates: the single-range kernels on each segment's sub-range in turn (the
// per-element arithmetic and every scalar factor are exactly a per-segment call's).
namespace {
template <class T>
T* advance(T* p, int64_t off) {
  return p ? p + off : nullptr;
}
}  // namespace

template <class P, class G, class S>
void adamw_step_segments(P* param, float* master, const G* grad, S* m, S* v, const OptimizerSegments& segs,
                         const AdamWHyper& h) {
  AdamWHyper hs = h;
  for (const OptimizerSegment& s : segs) {
    hs.weight_decay = s.weight_decay;
    adamw_step(param + s.offset, advance(master, s.offset), grad + s.offset, m + s.offset, v + s.offset, s.length, hs);
  }
}

template <class P, class G, class S>
void sgd_step_segments(P* param, float* master, const G* grad, S* buf, const OptimizerSegments& segs,
                       const SgdHyper& h) {
  SgdHyper hs = h;
  for (const OptimizerSegment& s : segs) {
    hs.weight_decay = s.weight_decay;
    sgd_step(param + s.offset, advance(master, s.offset), grad + s.offset, advance(buf, s.offset), s.length, hs);
  }
}

template <class P, class G, class S>
void lion_step_segments(P* param, float* master, const G* grad, S* m, const OptimizerSegments& segs,
                        const LionHyper& h) {
  LionHyper hs = h;
  for (const OptimizerSegment& s : segs) {
    hs.weight_decay = s.weight_decay;
    lion_step(param + s.offset, advance(master, s.offset), grad + s.offset, m + s.offset, s.length, hs);
  }
}

#define ZT_INSTANTIATE(P, G, S)                                                                                  \
  template void adamw_step<P, G, S>(P*, float*, const G*, S*, S*, int64_t, const AdamWHyper&);                   \
  template void sgd_step<P, G, S>(P*, float*, const G*, S*, int64_t, const SgdHyper&);                           \
  template void lion_step<P, G, S>(P*, float*, const G*, S*, int64_t, const LionHyper&);                         \
  template void adamw_step_segments<P, G, S>(P*, float*, const G*, S*, S*, const OptimizerSegments&,             \
                                             const AdamWHyper&);                                                 \
  template void sgd_step_segments<P, G, S>(P*, float*, const G*, S*, const OptimizerSegments&, const SgdHyper&); \
  template void lion_step_segments<P, G, S>(P*, float*, const G*, S*, const OptimizerSegments&, const LionHyper&);
ZT_INSTANTIATE(float, float, float)
ZT_INSTANTIATE(float, bf16, float)
ZT_INSTANTIATE(float, f16, float)
ZT_INSTANTIATE(bf16, float, float)
ZT_INSTANTIATE(bf16, bf16, float)
ZT_INSTANTIATE(bf16, f16, float)
ZT_INSTANTIATE(f16, float, float)
ZT_INSTANTIATE(f16, bf16, float)
ZT_INSTANTIATE(f16, f16, float)
// bf16 parameters and state, no master.
ZT_INSTANTIATE(bf16, float, bf16)
ZT_INSTANTIATE(bf16, bf16, bf16)
ZT_INSTANTIATE(bf16, f16, bf16)
#undef ZT_INSTANTIATE

namespace {

// bf16 parameter without a master: its state is bf16 (check_common verified it).
bool bf16_state(const Tensor& param, const Tensor& master) {
  return !master.has_data() && param.dtype() == DType::BF16;
}

// Calls fn(const G*) with the gradient pointer cast to its dtype (the bf16-state path,
// whose parameter is bf16).
template <class Fn>
void dispatch_grad(const Tensor& grad, Fn&& fn) {
  dispatch_float(grad.dtype(), [&](auto gtag) {
    using G = decltype(gtag);
    fn(static_cast<const G*>(grad.data()));
  });
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
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      cpu::adamw_step(static_cast<bf16*>(param.data()), nullptr, g, static_cast<bf16*>(m.data()),
                      static_cast<bf16*>(v.data()), param.numel(), h);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    cpu::adamw_step(p, master.storage_as<float>(), g, static_cast<float*>(m.data()), static_cast<float*>(v.data()),
                    param.numel(), h);
  });
}

void sgd_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
              const SgdHyper& h) {
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      cpu::sgd_step(static_cast<bf16*>(param.data()), nullptr, g, momentum_buf.storage_as<bf16>(), param.numel(), h);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    cpu::sgd_step(p, master.storage_as<float>(), g, momentum_buf.storage_as<float>(), param.numel(), h);
  });
}

void lion_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h) {
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      cpu::lion_step(static_cast<bf16*>(param.data()), nullptr, g, static_cast<bf16*>(m.data()), param.numel(), h);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    cpu::lion_step(p, master.storage_as<float>(), g, static_cast<float*>(m.data()), param.numel(), h);
  });
}

void adamw_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                         const Tensor& v, const AdamWHyper& h, const OptimizerSegments& segments) {
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      cpu::adamw_step_segments(static_cast<bf16*>(param.data()), nullptr, g, static_cast<bf16*>(m.data()),
                               static_cast<bf16*>(v.data()), segments, h);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    cpu::adamw_step_segments(p, master.storage_as<float>(), g, static_cast<float*>(m.data()),
                             static_cast<float*>(v.data()), segments, h);
  });
}

void sgd_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdHyper& h, const OptimizerSegments& segments) {
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      cpu::sgd_step_segments(static_cast<bf16*>(param.data()), nullptr, g, momentum_buf.storage_as<bf16>(), segments,
                             h);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    cpu::sgd_step_segments(p, master.storage_as<float>(), g, momentum_buf.storage_as<float>(), segments, h);
  });
}

void lion_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const LionHyper& h, const OptimizerSegments& segments) {
  if (bf16_state(param, master)) {
    dispatch_grad(grad, [&](const auto* g) {
      cpu::lion_step_segments(static_cast<bf16*>(param.data()), nullptr, g, static_cast<bf16*>(m.data()), segments, h);
    });
    return;
  }
  dispatch_param_grad(param, grad, [&](auto* p, const auto* g) {
    cpu::lion_step_segments(p, master.storage_as<float>(), g, static_cast<float*>(m.data()), segments, h);
  });
}

}  // namespace zt::cpu
