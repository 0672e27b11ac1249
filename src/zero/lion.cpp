#include "zero/lion.h"

#include "ops/optimizer.h"

namespace zt::zero {

Lion::Lion(model::ParameterRegistry& registry, const OptimizerSpec& spec, PartitionFn partitions,
            std::unique_ptr<StateStore> store)
    : FlatOptimizer(registry, spec, {"exp_avg"}, std::move(partitions), std::move(store)) {}

void Lion::update_unit(const UnitRange& r, float lr, float grad_scale) {
  ops::LionHyper h;
  h.lr = lr;
  h.beta1 = spec_.beta1;
  h.beta2 = spec_.beta2;
  h.grad_scale = grad_scale;
  ops::lion_step_segments(r.param, r.master, r.grad, r.state[0], h, r.segments);
}

}  // namespace zt::zero
