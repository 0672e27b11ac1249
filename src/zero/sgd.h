// SGD with torch.optim.SGD's semantics: L2 weight decay added to the gradient, optional
// momentum (buffer = first gradient on the first step), dampening and Nesterov. State:
// an f32 momentum_buffer per unit when momentum != 0.
#pragma once
#include "zero/optimizer_base.h"

namespace zt::zero {

class Sgd final : public FlatOptimizer {
 public:
  Sgd(model::ParameterRegistry& registry, const OptimizerSpec& spec, PartitionFn partitions = {},
        std::unique_ptr<StateStore> store = nullptr);
  // SGD has no betas; DeepSpeed's OneCycle skips momentum cycling for it.
  void set_betas(float, float) override {}

 private:
  void update_unit(const UnitRange& unit, float lr, float grad_scale) override;
};

}  // namespace zt::zero
