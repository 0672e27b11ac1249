// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as in
// lucidrains/lion-pytorch and DeepSpeed's FusedLion: the update is the sign of an
// interpolation of momentum and gradient; decoupled weight decay. State: f32 exp_avg.
#pragma once
#include "zero/optimizer_base.h"

namespace zt::zero {

class Lion final : public FlatOptimizer {
 public:
  Lion(model::ParameterRegistry& registry, const OptimizerSpec& spec, PartitionFn partitions = {},
        std::unique_ptr<StateStore> store = nullptr);

 private:
  void update_unit(const UnitRange& unit, float lr, float grad_scale) override;
};

}  // namespace zt::zero
