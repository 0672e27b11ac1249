// What ZeRO-Offload (zero/offload_optimizer.h) plugs into the ZeRO engine: the engine says
// when a unit's gradient partition is final, when it is about to reuse gradient buffers,
// and when it is about to read a unit's parameter partition; the offload copies gradients
// to the host from the first and makes the other two wait for copies and host updates
// still in flight. An interface of its own so that the engine knows nothing of copies,
// threads or host memory.
#pragma once
#include <cstddef>

#include "core/tensor.h"

namespace zt::zero {

class OffloadHooks {
 public:
  virtual ~OffloadHooks() = default;
  // Once per unit per optimizer step, as soon as the unit's gradient partition is final
  // (reduced over the ranks, every micro-batch of the accumulation in it), in the order
  // the backward finishes units, while the rest of the backward still runs. `grads` is
  // the engine's partition(unit).grads, valid until the next zero_grads(); on the GPU its
  // producing work is queued, not necessarily done (order a copy after the compute stream).
  virtual void gradient_ready(size_t unit, const Tensor& grads) = 0;
  // The engine is about to overwrite gradient buffers (zero_grads): whatever still reads
  // them must be ordered first.
  virtual void before_gradients_reset() = 0;
  // The engine (or the model through it) is about to read or overwrite the unit's
  // parameters: before its forward and backward, a stage-3 gather, the all-gather after
  // the step, a checkpoint's read or load, the full model's save.
  virtual void before_params_used(size_t unit) = 0;
  // Parameters were loaded into the engine's buffers (a checkpoint's resume): copies of
  // them held elsewhere (the host step's parameter staging) are stale.
  virtual void params_loaded() = 0;
};

}  // namespace zt::zero
