// Optimizer updates over flat f32 state, following PyTorch's single-tensor
// implementations operation by operation (same rounding points, so parity tests hold at
// ~1e-7). Parameters may be stored in bf16/f16 with an f32 master, or in bf16 with bf16
// state and no master (state loaded as f32, updated as the f32 path, stored rounded).
// The loops themselves are in optimizer_loops.h, compiled once per instruction set; this
// file picks the set (optimizer_isa.h) and casts the Tensors to their element types.
#include "backend/optimizer_kernels.h"
#include "core/dtype_dispatch.h"
#include "backend/cpu/optimizer_isa.h"
#include "backend/cpu/optimizer_isa_kernels.h"
#include "backend/cpu/optimizer_raw.h"

namespace zt::cpu {

namespace {
bool use_avx512() {
#if defined(__x86_64__)
  return optimizer_isa() == OptimizerIsa::Avx512;
#else
  return false;
#endif
}
}  // namespace

// fn<P, G, S> of the instruction set in use (P, G, S: the calling template's).
#if defined(__x86_64__)
#define ZT_CPU_OPTIMIZER_CALL(fn, args) (use_avx512() ? avx512::fn<P, G, S> args : avx2::fn<P, G, S> args)
#else
#define ZT_CPU_OPTIMIZER_CALL(fn, args) avx2::fn<P, G, S> args
#endif

// A single range is one segment with the hyper-parameters' weight decay.
template <class P, class G, class S>
void adamw_step(P* param, float* master, const G* grad, S* m, S* v, int64_t n, const AdamWHyper& h) {
  const OptimizerSegment all{0, n, h.weight_decay};
  ZT_CPU_OPTIMIZER_CALL(adamw_segments, (param, master, grad, m, v, &all, 1, h));
}

template <class P, class G, class S>
void sgd_step(P* param, float* master, const G* grad, S* buf, int64_t n, const SgdHyper& h) {
  const OptimizerSegment all{0, n, h.weight_decay};
  ZT_CPU_OPTIMIZER_CALL(sgd_segments, (param, master, grad, buf, &all, 1, h));
}

template <class P, class G, class S>
void lion_step(P* param, float* master, const G* grad, S* m, int64_t n, const LionHyper& h) {
  const OptimizerSegment all{0, n, h.weight_decay};
  ZT_CPU_OPTIMIZER_CALL(lion_segments, (param, master, grad, m, &all, 1, h));
}

template <class P, class G, class S>
void adamw_step_segments(P* param, float* master, const G* grad, S* m, S* v, const OptimizerSegments& segs,
                         const AdamWHyper& h) {
  ZT_CPU_OPTIMIZER_CALL(adamw_segments, (param, master, grad, m, v, segs.data(), segs.size(), h));
}

template <class P, class G, class S>
void sgd_step_segments(P* param, float* master, const G* grad, S* buf, const OptimizerSegments& segs,
                       const SgdHyper& h) {
  ZT_CPU_OPTIMIZER_CALL(sgd_segments, (param, master, grad, buf, segs.data(), segs.size(), h));
}

template <class P, class G, class S>
void lion_step_segments(P* param, float* master, const G* grad, S* m, const OptimizerSegments& segs,
                        const LionHyper& h) {
  ZT_CPU_OPTIMIZER_CALL(lion_segments, (param, master, grad, m, segs.data(), segs.size(), h));
}
#undef ZT_CPU_OPTIMIZER_CALL

#define ZT_INSTANTIATE(P, G, S)                                                                                  \
  template void adamw_step<P, G, S>(P*, float*, const G*, S*, S*, int64_t, const AdamWHyper&);                   \
  template void sgd_step<P, G, S>(P*, float*, const G*, S*, int64_t, const SgdHyper&);                           \
  template void lion_step<P, G, S>(P*, float*, const G*, S*, int64_t, const LionHyper&);                         \
  template void adamw_step_segments<P, G, S>(P*, float*, const G*, S*, S*, const OptimizerSegments&,             \
                                             const AdamWHyper&);                                                 \
  template void sgd_step_segments<P, G, S>(P*, float*, const G*, S*, const OptimizerSegments&, const SgdHyper&); \
  template void lion_step_segments<P, G, S>(P*, float*, const G*, S*, const OptimizerSegments&, const LionHyper&);
ZT_CPU_OPTIMIZER_TYPES(ZT_INSTANTIATE)
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
