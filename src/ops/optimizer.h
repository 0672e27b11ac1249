// Optimizer update kernels over flat buffers. One call updates one contiguous range
// (a parameter, or a unit's shard of parameters sharing a weight-decay setting).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace zt::ops {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;        // 1-based, for bias correction
  float grad_scale = 1.0f; // gradients are multiplied by this first (unscale x clip)
  bool decoupled = true;   // AdamW (decay on the weight); false = Adam with L2 in the gradient
  bool bias_correction = true;
};

// PyTorch's torch.optim.AdamW / Adam single-tensor update, in f32:
//   g = grad * grad_scale (+ wd * p when !decoupled); p *= 1 - lr*wd (when decoupled)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// master: f32 master weights (updated, then rounded into param), or undefined when param
// itself is f32. m, v: f32. grad: any float dtype.
void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h);

}  // namespace zt::ops
