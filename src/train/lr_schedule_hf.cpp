// HF Transformers' schedules (transformers/optimization.py: get_*_schedule_with_warmup),
// each a LambdaLR multiplier of the base lr evaluated at the optimizer step count.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "train/lr_schedule.h"

namespace zt::train {
namespace {

enum class HfKind { Constant, ConstantWithWarmup, Linear, Cosine, CosineWithRestarts, Polynomial, InverseSqrt };

// HF's defaults for the schedules' own arguments (TrainingArguments passes none unless
// lr_scheduler_kwargs says so): polynomial lr_end 1e-7 and power 1; cosine_with_restarts
// num_cycles 1; inverse_sqrt timescale = warmup steps, or 10,000 without warmup.
constexpr double kPolynomialLrEnd = 1e-7, kPolynomialPower = 1.0, kRestartCycles = 1.0;

class HfSchedule final : public LrSchedule {
 public:
  HfSchedule(HfKind kind, std::string name, double base_lr, int64_t warmup, int64_t total, double min_lr_ratio)
      : kind_(kind), name_(std::move(name)), base_(base_lr), warmup_(warmup), total_(total), min_ratio_(min_lr_ratio) {}

  float lr(int64_t step) const override { return static_cast<float>(base_ * factor(step)); }
  std::string describe() const override {
    std::ostringstream os;
    os << name_ << "(lr=" << base_ << ", warmup_steps=" << warmup_ << ", total_steps=" << total_;
    if (min_ratio_ > 0) os << ", min_lr_rate=" << min_ratio_;
    os << ")";
    return os.str();
  }

 private:
  double factor(int64_t step) const {
    const double s = static_cast<double>(step);
    if (kind_ == HfKind::Constant) return 1.0;
    if (step < warmup_) return s / std::max(1.0, static_cast<double>(warmup_));
    switch (kind_) {
      case HfKind::Constant:
      case HfKind::ConstantWithWarmup:
        return 1.0;
      case HfKind::Linear:
        return std::max(0.0, static_cast<double>(total_ - step) / std::max(1.0, static_cast<double>(total_ - warmup_)));
      case HfKind::CosineWithRestarts: {  // get_cosine_with_hard_restarts_schedule_with_warmup
        const double progress =
            (s - static_cast<double>(warmup_)) / std::max(1.0, static_cast<double>(total_ - warmup_));
        if (progress >= 1.0) return 0.0;
        return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(kRestartCycles * progress, 1.0))));
      }
      case HfKind::Polynomial: {  // get_polynomial_decay_schedule_with_warmup
        if (step > total_) return kPolynomialLrEnd / base_;
        const double remaining = 1.0 - (s - static_cast<double>(warmup_)) / static_cast<double>(total_ - warmup_);
        return ((base_ - kPolynomialLrEnd) * std::pow(remaining, kPolynomialPower) + kPolynomialLrEnd) / base_;
      }
      case HfKind::InverseSqrt: {  // get_inverse_sqrt_schedule
        const double timescale = warmup_ > 0 ? static_cast<double>(warmup_) : 10000.0;
        return 1.0 / std::sqrt((s + timescale - static_cast<double>(warmup_)) / timescale);
      }
      case HfKind::Cosine: {
        // num_cycles = 0.5; HF does not clamp progress past the end, neither do we.
        const double progress =
            (s - static_cast<double>(warmup_)) / std::max(1.0, static_cast<double>(total_ - warmup_));
        double f = 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress));
        if (min_ratio_ > 0) f = f * (1.0 - min_ratio_) + min_ratio_;  // get_cosine_with_min_lr_schedule_with_warmup
        return std::max(0.0, f);
      }
    }
    return 1.0;
  }
  HfKind kind_;
  std::string name_;
  double base_;
  int64_t warmup_, total_;
  double min_ratio_;
};

}  // namespace

std::unique_ptr<LrSchedule> make_hf_schedule(const std::string& type, float base_lr, int64_t warmup_steps,
                                             int64_t total_steps, float min_lr_ratio) {
  const std::string name = type.empty() ? "constant" : type;
  HfKind kind;
  if (name == "constant")
    kind = HfKind::Constant;
  else if (name == "constant_with_warmup")
    kind = HfKind::ConstantWithWarmup;
  else if (name == "linear")
    kind = HfKind::Linear;
  else if (name == "cosine" || name == "cosine_with_min_lr")
    kind = HfKind::Cosine;
  else if (name == "cosine_with_restarts")
    kind = HfKind::CosineWithRestarts;
  else if (name == "polynomial")
    kind = HfKind::Polynomial;
  else if (name == "inverse_sqrt")
    kind = HfKind::InverseSqrt;
  else
    ZT_THROW_INPUT("lr_scheduler_type \"", type,
                   "\" is not supported: use constant, constant_with_warmup, linear, cosine, cosine_with_min_lr, "
                   "cosine_with_restarts, polynomial or inverse_sqrt");
  if (!(base_lr >= 0.0f) || !std::isfinite(base_lr)) ZT_THROW_INPUT("learning_rate = ", base_lr, " must be >= 0");
  if (warmup_steps < 0) ZT_THROW_INPUT("warmup_steps = ", warmup_steps, " must be >= 0");
  const bool needs_total = kind == HfKind::Linear || kind == HfKind::Cosine || kind == HfKind::CosineWithRestarts ||
                           kind == HfKind::Polynomial;
  if (kind == HfKind::Polynomial && !(base_lr > kPolynomialLrEnd))
    ZT_THROW_INPUT("lr_scheduler_type \"polynomial\" decays to lr_end ", kPolynomialLrEnd,
                   " (HF's default): learning_rate (", base_lr, ") must be larger");
  if (kind == HfKind::Polynomial && total_steps <= warmup_steps && total_steps > 0)
    ZT_THROW_INPUT("lr_scheduler_type \"polynomial\" needs more total steps (", total_steps, ") than warmup steps (",
                   warmup_steps, ")");
  if (needs_total && total_steps <= 0)
    ZT_THROW_INPUT("lr_scheduler_type \"", name, "\" needs the total number of optimizer steps (got ", total_steps,
                   "): set max_steps or epochs");
  if (!(min_lr_ratio >= 0.0f && min_lr_ratio <= 1.0f))
    ZT_THROW_INPUT("min_lr_rate = ", min_lr_ratio, " must be in [0, 1]");
  if (min_lr_ratio > 0.0f && kind != HfKind::Cosine)
    ZT_THROW_INPUT("min_lr_rate = ", min_lr_ratio, " applies only to cosine schedules, not \"", name,
                   "\": use lr_scheduler_type cosine_with_min_lr or remove it");
  return std::make_unique<HfSchedule>(kind, name, base_lr, warmup_steps, total_steps, min_lr_ratio);
}

}  // namespace zt::train
