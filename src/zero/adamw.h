// AdamW over the parameter registry. Stage 0 / one rank for now: every unit's full range
// has f32 moments (and an f32 master copy when parameters are stored in 16 bits). The
// ZeRO stages will hold this state for the rank's partition only.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "model/registry.h"
#include "ops/optimizer.h"

namespace zt::zero {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = true;  // DeepSpeed's adam_w_mode
  bool bias_correction = true;
};

class AdamW {
 public:
  AdamW(model::ParameterRegistry& registry, AdamWConfig config);
  // One update with learning rate lr; gradients are multiplied by grad_scale first.
  void step(float lr, float grad_scale = 1.0f);
  int64_t steps_taken() const { return step_; }
  const AdamWConfig& config() const { return config_; }
  // Bytes of optimizer state (moments + master), for memory reports.
  size_t state_bytes() const;

 private:
  struct UnitState {
    OwnedTensor m, v, master;  // flat, padded_numel elements each (master only for 16-bit params)
  };
  model::ParameterRegistry& registry_;
  AdamWConfig config_;
  std::vector<UnitState> state_;
  int64_t step_ = 0;
};

// sqrt(sum of squares of every gradient), accumulated in double.
double global_grad_norm(model::ParameterRegistry& registry);

}  // namespace zt::zero
