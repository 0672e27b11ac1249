// Optimizer update kernels over flat buffers. One call updates one contiguous range
// (a parameter, or a unit's shard of parameters sharing a weight-decay setting).
#pragma once
#include <cstdint>

#include "backend/optimizer_hyper.h"
#include "core/tensor.h"

namespace zt::ops {

using AdamWHyper = ::zt::AdamWHyper;

// PyTorch's torch.optim.AdamW / Adam single-tensor update, in f32:
//   g = grad * grad_scale (+ wd * p when !decoupled); p *= 1 - lr*wd (when decoupled)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// master: f32 master weights (updated, then rounded into param), or undefined when param
// itself is f32. m, v: f32. grad: any float dtype.
void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h);

}  // namespace zt::ops
