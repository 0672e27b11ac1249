// Adam / AdamW over the parameter registry, with PyTorch's semantics: OptimizerType::AdamW
// (and Adam with adam_w_mode=true, DeepSpeed's default) decays the weights directly
// (torch.optim.AdamW); Adam with adam_w_mode=false adds wd*p to the gradient
// (torch.optim.Adam's L2). State: f32 exp_avg and exp_avg_sq per unit.
#pragma once
#include "zero/optimizer_base.h"

namespace zt::zero {

class AdamW final : public FlatOptimizer {
 public:
  AdamW(model::ParameterRegistry& registry, const OptimizerSpec& spec, PartitionFn partitions = {},
        std::unique_ptr<StateStore> store = nullptr);

 private:
  void update_unit(const UnitRange& unit, float lr, float grad_scale) override;
};

}  // namespace zt::zero
