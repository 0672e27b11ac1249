#include "zero/sgd.h"

#include "ops/optimizer.h"

namespace zt::zero {
namespace {
std::vector<std::string> sgd_state(const OptimizerSpec& spec) {
  if (spec.momentum == 0.0f) return {};
  return {"momentum_buffer"};
}
}  // namespace

Sgd::Sgd(model::ParameterRegistry& registry, const OptimizerSpec& spec, PartitionFn partitions,
          std::unique_ptr<StateStore> store)
    : FlatOptimizer(registry, spec, sgd_state(spec), std::move(partitions), std::move(store)) {}

void Sgd::update_unit(const UnitRange& r, float lr, float grad_scale) {
  ops::SgdHyper h;
  h.lr = lr;
  h.momentum = spec_.momentum;
  h.dampening = spec_.dampening;
  h.grad_scale = grad_scale;
  h.nesterov = spec_.nesterov ? Nesterov::On : Nesterov::Off;
  // The buffer holds a value once a step has run (also after resuming from a checkpoint).
  h.buffer = steps_taken() > 1 ? MomentumBuffer::Filled : MomentumBuffer::Empty;
  ops::sgd_step_segments(r.param, r.master, r.grad, r.state.empty() ? Tensor() : r.state[0], h, r.segments);
}

}  // namespace zt::zero
