#include "zero/loss_scaler.h"

#include <cmath>

#include "core/error.h"
#include "ops/elementwise.h"

namespace zt::zero {

LossScaler::LossScaler(LossScalerConfig config) : config_(config) {
  if (!config_.enabled) return;
  const LossScalerConfig& c = config_;
  if (!std::isfinite(c.loss_scale) || c.loss_scale < 0.0f)
    ZT_THROW_INPUT("fp16.loss_scale = ", c.loss_scale,
                   " is invalid: use 0 for dynamic scaling or a positive static scale");
  if (c.loss_scale > 0.0f) {
    scale_ = c.loss_scale;
    return;
  }
  // 2^127 is the largest power of two a float holds.
  if (c.initial_scale_power < 0 || c.initial_scale_power > 127)
    ZT_THROW_INPUT("fp16.initial_scale_power = ", c.initial_scale_power, " is out of range: use 0..127 (default 16)");
  if (c.loss_scale_window < 1)
    ZT_THROW_INPUT("fp16.loss_scale_window = ", c.loss_scale_window, " must be >= 1 (default 1000)");
  if (c.hysteresis < 1) ZT_THROW_INPUT("fp16.hysteresis = ", c.hysteresis, " must be >= 1 (default 2)");
  if (!std::isfinite(c.min_loss_scale) || c.min_loss_scale <= 0.0f)
    ZT_THROW_INPUT("fp16.min_loss_scale = ", c.min_loss_scale, " must be positive (default 1)");
  scale_ = std::ldexp(1.0f, c.initial_scale_power);
  hysteresis_left_ = c.hysteresis;
}

bool LossScaler::update(bool overflow) {
  skipped_in_a_row_ = overflow ? skipped_in_a_row_ + 1 : 0;
  if (!dynamic()) {
    if (overflow) ++skipped_;
    return overflow;
  }
  if (overflow) {
    if (hysteresis_left_ <= 1) {
      if (scale_ <= config_.min_loss_scale)
        ZT_THROW_INPUT("fp16 loss scale already at minimum (", scale_,
                       ") and the gradients still overflow: training diverged; lower the learning rate, "
                       "use bf16, or lower fp16.min_loss_scale");
      scale_ = std::max(scale_ / 2.0f, config_.min_loss_scale);
    } else {
      --hysteresis_left_;
    }
    clean_steps_ = 0;
    ++skipped_;
    return true;
  }
  ++clean_steps_;
  if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
  if (clean_steps_ % config_.loss_scale_window == 0) {
    hysteresis_left_ = config_.hysteresis;
    scale_ *= 2.0f;
  }
  return false;
}

LossScaler::State LossScaler::state() const { return {scale_, hysteresis_left_, clean_steps_, skipped_}; }

void LossScaler::restore(const State& s) {
  if (!(std::isfinite(s.scale) && s.scale > 0.0f) || s.hysteresis_left < 0 || s.clean_steps < 0 || s.skipped_steps < 0)
    ZT_THROW_INPUT("loss scaler state in the checkpoint is invalid (scale ", s.scale, ", hysteresis ",
                   s.hysteresis_left, ", clean steps ", s.clean_steps, ", skipped ", s.skipped_steps,
                   "): the checkpoint is corrupt; resume from another one");
  scale_ = s.scale;
  hysteresis_left_ = s.hysteresis_left;
  clean_steps_ = s.clean_steps;
  skipped_ = s.skipped_steps;
}

bool grads_finite(model::ParameterRegistry& registry) {
  for (auto& u : registry.units())
    if (u->has_grads() && !ops::all_finite(u->flat_grads())) return false;
  return true;
}

}  // namespace zt::zero
