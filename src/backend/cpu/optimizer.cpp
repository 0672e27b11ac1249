// AdamW over flat f32 state. Parameters may be stored in bf16/f16 with an f32 master.
#include "backend/cpu/optimizer.h"

#include <cmath>

namespace zt::cpu {

template <class P, class G>
void adamw_step(P* param, float* master, const G* grad, float* m, float* v, int64_t n, const AdamWHyper& h) {
  const float b1 = h.beta1, b2 = h.beta2;
  const float bc1 = h.bias_correction ? 1.0f - std::pow(b1, static_cast<float>(h.step)) : 1.0f;
  const float bc2 = h.bias_correction ? 1.0f - std::pow(b2, static_cast<float>(h.step)) : 1.0f;
  const float step_size = h.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float decay = h.decoupled ? 1.0f - h.lr * h.weight_decay : 1.0f;
  const float l2 = h.decoupled ? 0.0f : h.weight_decay;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float p = master ? master[i] : load_f32(param[i]);
    float g = load_f32(grad[i]) * h.grad_scale + l2 * p;
    p *= decay;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p -= step_size * mi / (std::sqrt(vi) / bc2_sqrt + h.eps);
    if (master) master[i] = p;
    param[i] = store_as<P>(p);
  }
}

#define ZT_INSTANTIATE(P, G) \
  template void adamw_step<P, G>(P*, float*, const G*, float*, float*, int64_t, const AdamWHyper&);
ZT_INSTANTIATE(float, float)
ZT_INSTANTIATE(float, bf16)
ZT_INSTANTIATE(float, f16)
ZT_INSTANTIATE(bf16, float)
ZT_INSTANTIATE(bf16, bf16)
ZT_INSTANTIATE(bf16, f16)
ZT_INSTANTIATE(f16, float)
ZT_INSTANTIATE(f16, bf16)
ZT_INSTANTIATE(f16, f16)
#undef ZT_INSTANTIATE

}  // namespace zt::cpu
