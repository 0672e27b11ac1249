// fp16 loss scaling with DeepSpeed's semantics (see shared/reference/ds_config.md):
// static when loss_scale > 0, else dynamic starting at 2^initial_scale_power, halved on
// overflow once hysteresis is used up (never below min_loss_scale), doubled after
// loss_scale_window clean steps. An overflowing step is skipped: neither the optimizer
// nor the LR schedule advances.
#pragma once
#include <cstdint>

namespace zt::zero {

struct LossScalerConfig {
  bool enabled = false;        // fp16 on
  float loss_scale = 0.0f;     // 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  float min_loss_scale = 1.0f;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});
  float scale() const { return scale_; }
  // Records the outcome of a step's gradient check; returns true when the step must be
  // skipped (overflow). Throws when the dynamic scale is already at its minimum and
  // overflows again.
  bool update(bool overflow);
  int64_t skipped_steps() const { return skipped_; }
  // Checkpoint state.
  struct State {
    float scale;
    int hysteresis_left;
    int64_t clean_steps;
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
};

}  // namespace zt::zero
