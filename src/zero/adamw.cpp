#include "zero/adamw.h"

#include "ops/optimizer.h"

namespace zt::zero {

AdamW::AdamW(model::ParameterRegistry& registry, const OptimizerSpec& spec, PartitionFn partitions,
              std::unique_ptr<StateStore> store)
    : FlatOptimizer(registry, spec, {"exp_avg", "exp_avg_sq"}, std::move(partitions), std::move(store)) {}

void AdamW::update_unit(const UnitRange& r, float lr, float grad_scale) {
  ops::AdamWHyper h;
  h.lr = lr;
  h.beta1 = spec_.beta1;
  h.beta2 = spec_.beta2;
  h.eps = spec_.eps;
  h.step = steps_taken();
  h.grad_scale = grad_scale;
  const bool decoupled = spec_.type == OptimizerType::AdamW || spec_.adam_w_mode;
  h.decay = decoupled ? AdamDecay::Decoupled : AdamDecay::L2;
  h.bias_correction = spec_.bias_correction ? BiasCorrection::On : BiasCorrection::Off;
  ops::adamw_step_segments(r.param, r.master, r.grad, r.state[0], r.state[1], h, r.segments);
}

}  // namespace zt::zero
