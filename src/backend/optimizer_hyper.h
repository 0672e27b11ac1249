// Hyper-parameters of one optimizer update, shared by the CPU and CUDA kernels (backend
// layer) and the op wrappers above them.
#pragma once
#include <cstdint>

namespace zt {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // gradients are multiplied by this first (unscale x clip)
  bool decoupled = true;    // AdamW (decay on the weight); false = Adam with L2 in the gradient
  bool bias_correction = true;
};

}  // namespace zt
