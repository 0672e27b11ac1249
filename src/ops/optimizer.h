// Optimizer update kernels over flat buffers. One call updates one contiguous range
// (a parameter, or a unit's shard of parameters sharing a weight-decay setting).
// Common to all: param is any float dtype; master is the f32 master copy (updated, then
// rounded into param), or an undefined Tensor when param itself is f32; grad is any float
// dtype and is multiplied by h.grad_scale first; all state tensors are f32.
#pragma once
#include <cstdint>

#include "backend/optimizer_hyper.h"
#include "core/tensor.h"

namespace zt::ops {

using AdamWHyper = ::zt::AdamWHyper;
using SgdHyper = ::zt::SgdHyper;
using LionHyper = ::zt::LionHyper;

// PyTorch's torch.optim.AdamW / Adam single-tensor update, in f32:
//   g = grad * grad_scale (+ wd * p for AdamDecay::L2); p *= 1 - lr*wd (for Decoupled)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
void adamw_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWHyper& h);

// torch.optim.SGD: d = grad*grad_scale + wd*p; with momentum, buf = d on the first step
// (h.buffer == Empty) else momentum*buf + (1-dampening)*d, and d = nesterov ? d + momentum*buf
// : buf; p -= lr*d. momentum_buf is undefined when h.momentum == 0.
void sgd_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
              const SgdHyper& h);

// Lion: p *= 1 - lr*wd; p -= lr*sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g.
void lion_step(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m, const LionHyper& h);

}  // namespace zt::ops
