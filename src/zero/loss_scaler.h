// fp16 loss scaling with DeepSpeed's semantics (DynamicLossScaler in
// deepspeed/runtime/fp16/loss_scaler.py; see shared/reference/ds_config.md):
//   - dynamic when loss_scale == 0: start at 2^initial_scale_power. On overflow, once the
//     hysteresis is used up, scale = max(scale / 2, min_loss_scale) (overflowing while
//     already at min_loss_scale is an error); otherwise hysteresis -= 1. After every
//     loss_scale_window clean steps counted since the last overflow (or the start),
//     scale *= 2 and the hysteresis is refilled; with consecutive_hysteresis the
//     hysteresis is refilled after every clean step instead.
//   - static when loss_scale > 0: the scale never changes.
//   - disabled (no fp16): scale 1.
// In every mode an overflowing step is skipped (neither the optimizer nor the LR schedule
// advances): DeepSpeed's ZeRO optimizers and its bf16 check_grad_overflow skip such steps
// too, and applying inf/nan gradients would destroy the weights.
#pragma once
#include <cstdint>

#include "model/registry.h"

namespace zt::zero {

struct LossScalerConfig {
  bool enabled = false;     // fp16 on
  float loss_scale = 0.0f;  // 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  float min_loss_scale = 1.0f;
};

class LossScaler {
 public:
  // Throws (naming the fp16.* key) on invalid settings.
  explicit LossScaler(LossScalerConfig config = {});
  float scale() const { return scale_; }
  bool dynamic() const { return config_.enabled && config_.loss_scale == 0.0f; }
  // Records the outcome of a step's gradient check; returns true when the step must be
  // skipped (overflow). Throws when the dynamic scale is already at its minimum and
  // overflows again (hysteresis used up).
  bool update(bool overflow);
  int64_t skipped_steps() const { return skipped_; }
  // Steps skipped since the last clean one (not part of the checkpoint state).
  int64_t skipped_in_a_row() const { return skipped_in_a_row_; }
  // Checkpoint state.
  struct State {
    float scale;
    int hysteresis_left;
    int64_t clean_steps;  // clean steps since the last overflow (or the start)
    int64_t skipped_steps;
  };
  State state() const;
  void restore(const State& s);
  const LossScalerConfig& config() const { return config_; }

 private:
  LossScalerConfig config_;
  float scale_ = 1.0f;
  int hysteresis_left_ = 0;
  int64_t clean_steps_ = 0;
  int64_t skipped_ = 0;
  int64_t skipped_in_a_row_ = 0;
};

// True when every gradient of every unit is finite (ops::all_finite over the flat
// gradient buffers). Units without gradients count as finite.
bool grads_finite(model::ParameterRegistry& registry);

}  // namespace zt::zero
