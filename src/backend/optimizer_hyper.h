// Hyper-parameters of one optimizer update, shared by the CPU and CUDA kernels (backend
// layer) and the op wrappers above them. Every update first multiplies the gradient by
// grad_scale (1 / loss scale x clip coefficient), so unscaling costs no extra pass.
#pragma once
#include <cstdint>

namespace zt {

// Adam's weight decay: decoupled (AdamW, DeepSpeed adam_w_mode=true: p *= 1 - lr*wd) or
// L2 (torch.optim.Adam, adam_w_mode=false: wd*p added to the gradient, so it enters m and v).
enum class AdamDecay { Decoupled, L2 };
enum class BiasCorrection { On, Off };
enum class Nesterov { Off, On };
// SGD's momentum buffer starts as a copy of the first gradient (torch.optim.SGD), so the
// kernel must know whether the buffer holds anything yet.
enum class MomentumBuffer { Empty, Filled };

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // gradients are multiplied by this first (unscale x clip)
  AdamDecay decay = AdamDecay::Decoupled;
  BiasCorrection bias_correction = BiasCorrection::On;
};

struct SgdHyper {
  float lr = 1e-3f;
  float momentum = 0.0f;  // 0: no buffer
  float dampening = 0.0f;
  float weight_decay = 0.0f;  // L2, added to the gradient (torch.optim.SGD)
  float grad_scale = 1.0f;
  Nesterov nesterov = Nesterov::Off;
  MomentumBuffer buffer = MomentumBuffer::Empty;
};

struct LionHyper {
  float lr = 1e-4f;
  float beta1 = 0.9f;         // interpolation for the update direction
  float beta2 = 0.99f;        // momentum decay
  float weight_decay = 0.0f;  // decoupled: p *= 1 - lr*wd
  float grad_scale = 1.0f;
};

}  // namespace zt
