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

int64_t read_steps(ScheduleParams& p, const std::string& key, int64_t dflt, int64_t auto_value, const char* what) {
  if (p.is_auto(key)) {
    p.accept(key);
    if (auto_value < 0)
      p.fail(key, std::string("\"auto\" needs the run's ") + what + ", which is not known here; write a number");
    return auto_value;
  }
  const auto v = p.integer(key);
  return v ? *v : dflt;
}

Warmup read_warmup(ScheduleParams& p, const ScheduleRun& run) {
  Warmup w;
  const int64_t n = read_steps(p, "warmup_num_steps", 1000, run.warmup_steps, "warmup steps");
  if (n <= 0) p.fail("warmup_num_steps", "must be a positive integer, got " + std::to_string(n));
  w.num_steps = std::max<int64_t>(2, n);
  // DeepSpeed falls back to log with a warning for unknown names; a typo should not
  // silently change the schedule, so we refuse it.
  const std::string type = p.string("warmup_type").value_or("log");
  if (type == "log")
    w.type = WarmupType::Log;
  else if (type == "linear")
    w.type = WarmupType::Linear;
  else
    p.fail("warmup_type", "unknown warmup type \"" + type + "\"; use \"log\" or \"linear\"");
  return w;
}

double read_lr(ScheduleParams& p, const std::string& key, double dflt, double auto_value) {
  if (p.is_auto(key)) {
    p.accept(key);
    return auto_value;
  }
  const double v = p.number(key).value_or(dflt);
  if (v < 0) p.fail(key, "a learning rate must be >= 0");
  return v;
}

int64_t read_total(ScheduleParams& p, const ScheduleRun& run) {
  if (!p.has("total_num_steps")) p.fail("total_num_steps", "required; set it to the run's number of optimizer steps");
  const int64_t t = read_steps(p, "total_num_steps", 0, run.total_steps, "total optimizer steps");
  if (t < 0) p.fail("total_num_steps", "must be >= 0");
  return t;
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

std::unique_ptr<LrSchedule> make_warmup(ScheduleParams& p, bool decay, double base_lr, const ScheduleRun& run) {
  std::optional<int64_t> total;
  if (decay) total = read_total(p, run);
  const double min_lr = read_lr(p, "warmup_min_lr", 0.0, 0.0);
  // WarmupLR defaults warmup_max_lr to the optimizer's lr; WarmupDecayLR's signature
  // passes its own default of 0.001 to WarmupLR, so DeepSpeed uses 0.001 there.
  const double max_lr = read_lr(p, "warmup_max_lr", decay ? 0.001 : base_lr, base_lr);
  const Warmup w = read_warmup(p, run);
  return std::make_unique<WarmupLr>(min_lr, max_lr, w, total);
}

std::unique_ptr<LrSchedule> make_cosine(ScheduleParams& p, double base_lr, const ScheduleRun& run) {
  const int64_t total = read_total(p, run);
  const double warmup_min_ratio = p.number("warmup_min_ratio").value_or(0.0);
  const double cos_min_ratio = p.number("cos_min_ratio").value_or(1e-4);
  if (warmup_min_ratio < 0 || warmup_min_ratio > 1) p.fail("warmup_min_ratio", "must be in [0, 1]");
  if (cos_min_ratio < 0 || cos_min_ratio > 1) p.fail("cos_min_ratio", "must be in [0, 1]");
  const Warmup w = read_warmup(p, run);
  return std::make_unique<WarmupCosineLr>(base_lr, total, warmup_min_ratio, cos_min_ratio, w);
}

std::unique_ptr<LrSchedule> make_one_cycle(ScheduleParams& p) {
  OneCycle::Params c;
  for (const char* key : {"cycle_min_lr", "cycle_max_lr"})
    if (!p.has(key)) p.fail(key, "required by OneCycle; set the cycle's learning-rate bounds");
  c.min_lr = *p.number("cycle_min_lr");
  c.max_lr = *p.number("cycle_max_lr");
  if (c.min_lr < 0 || c.max_lr < 0)
    p.fail(c.min_lr < 0 ? "cycle_min_lr" : "cycle_max_lr", "a learning rate must be >= 0");
  c.decay_lr_rate = p.number("decay_lr_rate").value_or(0.0);
  c.first_size = static_cast<double>(p.integer("cycle_first_step_size").value_or(2000));
  if (c.first_size <= 0) p.fail("cycle_first_step_size", "must be a positive number of steps");
  c.second_size = static_cast<double>(p.integer("cycle_second_step_size").value_or(static_cast<int64_t>(c.first_size)));
  if (c.second_size <= 0) p.fail("cycle_second_step_size", "must be a positive number of steps");
  c.first_stairs = p.integer("cycle_first_stair_count").value_or(0);
  c.second_stairs = p.integer("cycle_second_stair_count").value_or(c.first_stairs);
  if (c.first_stairs < 0 || c.second_stairs < 0)
    p.fail(c.first_stairs < 0 ? "cycle_first_stair_count" : "cycle_second_stair_count", "must be >= 0 (0 = no stairs)");
  c.decay_step_size = static_cast<double>(p.integer("decay_step_size").value_or(0));
  if (c.decay_step_size < 0) p.fail("decay_step_size", "must be >= 0 (0 = no decay after the cycle)");
  c.cycle_momentum = p.boolean("cycle_momentum").value_or(true);
  c.min_mom = p.number("cycle_min_mom").value_or(0.8);
  c.max_mom = p.number("cycle_max_mom").value_or(0.9);
  c.decay_mom_rate = p.number("decay_mom_rate").value_or(0.0);
  return std::make_unique<OneCycle>(c);
}

std::unique_ptr<LrSchedule> make_range_test(ScheduleParams& p) {
  const double min_lr = read_lr(p, "lr_range_test_min_lr", 1e-3, 1e-3);
  const int64_t size = p.integer("lr_range_test_step_size").value_or(2000);
  if (size <= 0) p.fail("lr_range_test_step_size", "must be a positive number of steps");
  const double rate = p.number("lr_range_test_step_rate").value_or(1.0);
  const bool staircase = p.boolean("lr_range_test_staircase").value_or(false);
  return std::make_unique<LrRangeTest>(min_lr, static_cast<double>(size), rate, staircase);
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
    ZT_THROW_INPUT(source,
                   ": scheduler.type: required string; one of WarmupLR, WarmupDecayLR, WarmupCosineLR, "
                   "OneCycle, LRRangeTest");
  const std::string type = t->get<std::string>();
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const auto pit = block.find("params");
  ScheduleParams p(pit == block.end() ? kEmpty : *pit, source, type);
  // Resuming sets the step count from the checkpoint; a configured start would shift it.
  if (p.has("last_batch_iteration"))
    p.fail("last_batch_iteration", "not supported: the schedule resumes from the checkpoint's step; remove it");

  std::unique_ptr<LrSchedule> s;
  if (type == "WarmupLR")
    s = make_warmup(p, false, base_lr, run);
  else if (type == "WarmupDecayLR")
    s = make_warmup(p, true, base_lr, run);
  else if (type == "WarmupCosineLR")
    s = make_cosine(p, base_lr, run);
  else if (type == "OneCycle")
    s = make_one_cycle(p);
  else if (type == "LRRangeTest")
    s = make_range_test(p);
  else
    ZT_THROW_INPUT(source, ": scheduler.type: unknown scheduler \"", type,
                   "\"; use one of WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest (exact case)");
  p.finish();
  return s;
}

}  // namespace zt::train
