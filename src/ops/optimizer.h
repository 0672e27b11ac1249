// Optimizer update kernels over flat buffers. One call updates one contiguous range
// (a parameter, or a unit's shard of parameters sharing a weight-decay setting); the
// *_segments variants update a range cut into segments of different weight decay (a
// unit's slice: one kernel launch on the GPU for all its parameters).
// Common to all: param is any float dtype; master is the f32 master copy (updated, then
// rounded into param), or an undefined Tensor when param itself holds the weights; grad is
// any float dtype and is multiplied by h.grad_scale first. State tensors are f32 — or, with
// no master and bf16 parameters (MasterWeights::None, "pure bf16"), all bf16: parameter and
// state are loaded as f32, updated exactly as the f32-state path does, and stored rounded
// to nearest even (PyTorch's fused AdamW "opmath" on bf16 tensors). A 16-bit parameter
// without a master needs bf16 parameter and state (an f16 one is refused).
#pragma once
#include <cstdint>

#include "backend/optimizer_hyper.h"
#include "backend/optimizer_segments.h"
#include "core/tensor.h"

namespace zt::ops {

using AdamWHyper = ::zt::AdamWHyper;
using SgdHyper = ::zt::SgdHyper;
using LionHyper = ::zt::LionHyper;
using OptimizerSegment = ::zt::OptimizerSegment;
using OptimizerSegments = ::zt::OptimizerSegments;

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

// The same updates over the segments of the range (backend/optimizer_segments.h): each
// segment's elements are updated exactly as the single-range call on that segment's views
// with h.weight_decay = the segment's weight decay (h.weight_decay itself is ignored);
// elements outside every segment are untouched. Segments must be sorted, non-overlapping
// and inside the range.
void adamw_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                         const Tensor& v, const AdamWHyper& h, const OptimizerSegments& segments);
void sgd_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdHyper& h, const OptimizerSegments& segments);
void lion_step_segments(const Tensor& param, const Tensor& master, const Tensor& grad, const Tensor& m,
                        const LionHyper& h, const OptimizerSegments& segments);

}  // namespace zt::ops
