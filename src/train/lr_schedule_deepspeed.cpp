// DeepSpeed's schedules (deepspeed/runtime/lr_schedules.py), transcribed formula by formula
// in double precision. Each is written over DeepSpeed's `last_batch_iteration` (it = step
// - 1, see lr_schedule.h); it = -1 is the value the constructor installs.
#include <algorithm>
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/lr_schedule.h"
#include "train/lr_schedule_params.h"

namespace zt::train {
namespace {

enum class WarmupType { Log, Linear };

// The warmup shared by WarmupLR, WarmupDecayLR and WarmupCosineLR.
struct Warmup {
  WarmupType type = WarmupType::Log;
  int64_t num_steps = 1000;  // already max(2, given), as DeepSpeed stores it

  // DeepSpeed's _get_gamma during warmup (it < num_steps).
  double gamma(int64_t it) const {
    if (type == WarmupType::Log)
      return std::log(static_cast<double>(it + 1)) / std::log(static_cast<double>(num_steps));
    return static_cast<double>(it) / static_cast<double>(num_steps);
  }
  const char* type_name() const { return type == WarmupType::Log ? "log" : "linear"; }
};

Warmup read_warmup(const ScheduleParams& p) {
  Warmup w;
  w.num_steps = std::max<int64_t>(2, p.steps("warmup_num_steps"));
  w.type = p.choice("warmup_type") == "linear" ? WarmupType::Linear : WarmupType::Log;
  return w;
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// WarmupLR and WarmupDecayLR (the latter when total_num_steps is set).
class WarmupLr final : public LrSchedule {
 public:
  WarmupLr(double min_lr, double max_lr, Warmup warmup, std::optional<int64_t> total)
      : min_(min_lr), delta_(max_lr - min_lr), warmup_(warmup), total_(total) {}

  float lr(int64_t step) const override {
    const int64_t it = step - 1;
    if (it < 0) return static_cast<float>(min_);
    return static_cast<float>(min_ + delta_ * gamma(it));
  }
  std::string describe() const override {
    std::string s = total_ ? "WarmupDecayLR(total_num_steps=" + std::to_string(*total_) + ", " : "WarmupLR(";
    return s + "warmup_min_lr=" + num(min_) + ", warmup_max_lr=" + num(min_ + delta_) +
           ", warmup_num_steps=" + std::to_string(warmup_.num_steps) + ", warmup_type=" + warmup_.type_name() + ")";
  }

 private:
  double gamma(int64_t it) const {
    if (it < warmup_.num_steps) return warmup_.gamma(it);
    if (!total_) return 1.0;
    return std::max(
        0.0, static_cast<double>(*total_ - it) / std::max(1.0, static_cast<double>(*total_ - warmup_.num_steps)));
  }
  double min_, delta_;
  Warmup warmup_;
  std::optional<int64_t> total_;
};

class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(double base_lr, int64_t total, double warmup_min_ratio, double cos_min_ratio, Warmup warmup)
      : base_(base_lr),
        total_(total),
        warmup_min_ratio_(warmup_min_ratio),
        cos_min_ratio_(cos_min_ratio),
        warmup_(warmup) {}

  float lr(int64_t step) const override { return static_cast<float>(base_ * ratio(step - 1)); }
  std::string describe() const override {
    return "WarmupCosineLR(total_num_steps=" + std::to_string(total_) + ", warmup_min_ratio=" + num(warmup_min_ratio_) +
           ", warmup_num_steps=" + std::to_string(warmup_.num_steps) + ", cos_min_ratio=" + num(cos_min_ratio_) +
           ", warmup_type=" + warmup_.type_name() + ", lr=" + num(base_) + ")";
  }

 private:
  double ratio(int64_t it) const {
    if (it < 0) return 0.0;
    if (it < warmup_.num_steps) return warmup_min_ratio_ + warmup_.gamma(it) * (1.0 - warmup_min_ratio_);
    const double real_last = static_cast<double>(it - warmup_.num_steps + 1);
    const double real_total = static_cast<double>(std::max<int64_t>(1, total_ - warmup_.num_steps));
    const double progress = std::min(1.0, real_last / real_total);
    const double r = (1.0 + std::cos(M_PI * progress)) / 2.0;
    return std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * r);
  }
  double base_;
  int64_t total_;
  double warmup_min_ratio_, cos_min_ratio_;
  Warmup warmup_;
};

class OneCycle final : public LrSchedule {
 public:
  struct Params {
    double min_lr = 0, max_lr = 0, decay_lr_rate = 0;
    double first_size = 2000, second_size = 2000;
    int64_t first_stairs = 0, second_stairs = 0;
    double decay_step_size = 0;
    bool cycle_momentum = true;
    double min_mom = 0.8, max_mom = 0.9, decay_mom_rate = 0;
  };
  explicit OneCycle(Params p) : p_(p), total_size_(p.first_size + p.second_size) {
    step_ratio_ = p.first_size / total_size_;
    const bool no_decay_steps = std::fabs(p.decay_step_size) <= 1e-9;
    skip_lr_decay_ = no_decay_steps || std::fabs(p.decay_lr_rate) <= 1e-9;
    skip_mom_decay_ = no_decay_steps || std::fabs(p.decay_mom_rate) <= 1e-9;
  }

  float lr(int64_t step) const override {
    const int64_t it = step - 1;
    if (it < 0) return static_cast<float>(p_.min_lr);
    if (static_cast<double>(it) < total_size_)
      return static_cast<float>(p_.min_lr + (p_.max_lr - p_.min_lr) * scale(it));
    if (skip_lr_decay_) return static_cast<float>(p_.min_lr);
    const double interval = static_cast<double>(it) - total_size_ + 1.0;
    return static_cast<float>(p_.min_lr / (1.0 + p_.decay_lr_rate * (interval / p_.decay_step_size)));
  }
  std::optional<std::pair<float, float>> betas(int64_t step) const override {
    if (!p_.cycle_momentum) return std::nullopt;
    const int64_t it = step - 1;
    constexpr float kBeta2 = 0.99f;  // DeepSpeed replaces beta2 by 0.99 while cycling
    if (it < 0) return std::make_pair(static_cast<float>(p_.min_mom), kBeta2);
    if (static_cast<double>(it) < total_size_)
      return std::make_pair(static_cast<float>(p_.max_mom - (p_.max_mom - p_.min_mom) * scale(it)), kBeta2);
    if (skip_mom_decay_) return std::make_pair(static_cast<float>(p_.max_mom), kBeta2);
    const double interval = static_cast<double>(it) - total_size_ + 1.0;
    return std::make_pair(static_cast<float>(p_.max_mom * (1.0 + p_.decay_mom_rate * (interval / p_.decay_step_size))),
                          kBeta2);
  }
  std::string describe() const override {
    return "OneCycle(cycle_min_lr=" + num(p_.min_lr) + ", cycle_max_lr=" + num(p_.max_lr) +
           ", cycle_first_step_size=" + num(p_.first_size) + ", cycle_second_step_size=" + num(p_.second_size) +
           ", decay_lr_rate=" + num(p_.decay_lr_rate) + ", decay_step_size=" + num(p_.decay_step_size) +
           (p_.cycle_momentum ? ", momentum " + num(p_.min_mom) + ".." + num(p_.max_mom) : std::string()) + ")";
  }

 private:
  // DeepSpeed's _get_scale_factor at batch_iteration = it + 1.
  double scale(int64_t it) const {
    const double b = static_cast<double>(it + 1);
    const double cycle = std::floor(1.0 + b / total_size_);
    const double x = 1.0 + b / total_size_ - cycle;
    double s;
    int64_t stairs;
    if (x <= step_ratio_) {
      s = x / step_ratio_;
      stairs = p_.first_stairs;
    } else {
      s = (x - 1.0) / (step_ratio_ - 1.0);
      stairs = p_.second_stairs;
    }
    if (stairs > 0) {
      const double ci = std::fmod(b, total_size_);
      const double pos = ci <= p_.first_size ? ci * static_cast<double>(stairs) / p_.first_size
                                             : (total_size_ - ci) * static_cast<double>(stairs) / p_.second_size;
      s = std::floor(pos) / static_cast<double>(stairs);
    }
    return s;
  }
  Params p_;
  double total_size_, step_ratio_ = 0.5;
  bool skip_lr_decay_ = true, skip_mom_decay_ = true;
};

class LrRangeTest final : public LrSchedule {
 public:
  LrRangeTest(double min_lr, double step_size, double step_rate, bool staircase)
      : min_(min_lr), size_(step_size), rate_(step_rate), staircase_(staircase) {}
  float lr(int64_t step) const override {
    const int64_t it = step - 1;
    if (it < 0) return static_cast<float>(min_);
    double interval = static_cast<double>(it + 1) / size_;
    if (staircase_) interval = std::floor(interval);
    return static_cast<float>(min_ * (1.0 + rate_ * interval));
  }
  std::string describe() const override {
    return "LRRangeTest(lr_range_test_min_lr=" + num(min_) + ", lr_range_test_step_size=" + num(size_) +
           ", lr_range_test_step_rate=" + num(rate_) + ", lr_range_test_staircase=" + (staircase_ ? "true" : "false") +
           ")";
  }

 private:
  double min_, size_, rate_;
  bool staircase_;
};

std::unique_ptr<LrSchedule> make_warmup(const ScheduleParams& p, bool decay) {
  std::optional<int64_t> total;
  if (decay) total = p.steps("total_num_steps");
  return std::make_unique<WarmupLr>(p.number("warmup_min_lr"), p.number("warmup_max_lr"), read_warmup(p), total);
}

std::unique_ptr<LrSchedule> make_cosine(const ScheduleParams& p, double base_lr) {
  return std::make_unique<WarmupCosineLr>(base_lr, p.steps("total_num_steps"), p.number("warmup_min_ratio"),
                                          p.number("cos_min_ratio"), read_warmup(p));
}

std::unique_ptr<LrSchedule> make_one_cycle(const ScheduleParams& p) {
  OneCycle::Params c;
  c.min_lr = p.number("cycle_min_lr");
  c.max_lr = p.number("cycle_max_lr");
  c.decay_lr_rate = p.number("decay_lr_rate");
  c.first_size = static_cast<double>(p.steps("cycle_first_step_size"));
  c.second_size = static_cast<double>(p.steps("cycle_second_step_size"));
  c.first_stairs = p.steps("cycle_first_stair_count");
  c.second_stairs = p.steps("cycle_second_stair_count");
  c.decay_step_size = static_cast<double>(p.steps("decay_step_size"));
  c.cycle_momentum = p.boolean("cycle_momentum");
  c.min_mom = p.number("cycle_min_mom");
  c.max_mom = p.number("cycle_max_mom");
  c.decay_mom_rate = p.number("decay_mom_rate");
  return std::make_unique<OneCycle>(c);
}

std::unique_ptr<LrSchedule> make_range_test(const ScheduleParams& p) {
  return std::make_unique<LrRangeTest>(p.number("lr_range_test_min_lr"),
                                       static_cast<double>(p.steps("lr_range_test_step_size")),
                                       p.number("lr_range_test_step_rate"), p.boolean("lr_range_test_staircase"));
}

// The schedule's values over the run's steps must stay in the optimizer's range (lr >= 0
// and finite; a momentum in [0, 1), which Adam's bias correction divides by 1 - beta1^t):
// each param's own range is checked at load, but decay rates move the values step by step
// (OneCycle's decay_mom_rate grows beta1 past 1). Checked at start-up, before the first
// step, over every step of a run up to a million steps; beyond that, a million evenly
// spaced ones and the last (the decays are monotonic after the cycle).
void check_schedule_range(const LrSchedule& s, int64_t total_steps, const std::string& source) {
  constexpr int64_t kScanned = 1000000;
  const int64_t stride = total_steps <= kScanned ? 1 : total_steps / kScanned;
  for (int64_t step = 0;; step = std::min(step + stride, total_steps - 1)) {
    const float lr = s.lr(step);
    if (!std::isfinite(lr) || lr < 0)
      ZT_THROW_INPUT(source, ": scheduler: ", s.describe(), " gives learning rate ", lr, " at step ", step + 1, " of ",
                     total_steps, "; an lr must be finite and >= 0: fix the decay rate or the lr params");
    if (const auto b = s.betas(step); b && !(b->first >= 0.0f && b->first < 1.0f))
      ZT_THROW_INPUT(source, ": scheduler.params.decay_mom_rate: ", s.describe(), " gives momentum (beta1) ", b->first,
                     " at step ", step + 1, " of ", total_steps,
                     "; it must stay in [0, 1): lower decay_mom_rate or cycle_max_mom (or set cycle_momentum false)");
    if (step == total_steps - 1) break;
  }
}

}  // namespace

std::unique_ptr<LrSchedule> make_deepspeed_schedule(const nlohmann::json& block, float base_lr,
                                                    const std::string& source, const ScheduleRun& run) {
  if (!block.is_object()) ZT_THROW_INPUT(source, ": scheduler: expected an object {\"type\", \"params\"}");
  for (const auto& item : block.items())
    if (item.key() != "type" && item.key() != "params")
      ZT_THROW_INPUT(source, ": scheduler.", item.key(), ": unknown key; a scheduler has only \"type\" and \"params\"");
  const auto t = block.find("type");
  if (t == block.end() || !t->is_string())
    ZT_THROW_INPUT(source, ": scheduler.type: required string; one of ", config::schedule_type_list());
  // Exact case: a validated block holds the canonical spelling.
  const std::string name = t->get<std::string>();
  const std::optional<config::ScheduleType> type = config::schedule_type_from_name(name);
  if (!type || name != config::schedule_type_name(*type))
    ZT_THROW_INPUT(source, ": scheduler.type: unknown scheduler \"", name, "\"; use one of ",
                   config::schedule_type_list(), " (exact case)");
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const auto pit = block.find("params");
  const ScheduleParams p(pit == block.end() ? kEmpty : *pit, source, *type, base_lr, run);
  std::unique_ptr<LrSchedule> s;
  switch (*type) {
    case config::ScheduleType::WarmupLR:
      s = make_warmup(p, false);
      break;
    case config::ScheduleType::WarmupDecayLR:
      s = make_warmup(p, true);
      break;
    case config::ScheduleType::WarmupCosineLR:
      s = make_cosine(p, base_lr);
      break;
    case config::ScheduleType::OneCycle:
      s = make_one_cycle(p);
      break;
    case config::ScheduleType::LRRangeTest:
      s = make_range_test(p);
      break;
  }
  if (run.total_steps > 0) check_schedule_range(*s, run.total_steps, source);
  return s;
}

}  // namespace zt::train
