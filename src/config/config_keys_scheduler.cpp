// The "scheduler.params" table (scheduler_keys.h). Defaults are DeepSpeed's constructor
// defaults (deepspeed/runtime/lr_schedules.py); where DeepSpeed takes anything, the range
// here refuses what would make its formulas divide by zero or run backwards.
#include "config/scheduler_keys.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "config/config_value.h"

namespace zt::config {

namespace {

using T = ScheduleType;
using K = SchedulerParamKind;
using D = SchedulerDefault;
using A = SchedulerAuto;

constexpr double kInf = std::numeric_limits<double>::infinity();

SchedulerParamKey row(std::string key, std::vector<T> types, K kind, D rule, double dflt, std::string dflt_text,
                      double min_value, double max_value, A auto_rule, std::string doc) {
  return {std::move(key), std::move(types), kind, rule, dflt, "", std::move(dflt_text), min_value, max_value,
          auto_rule, "", std::move(doc)};
}

std::vector<SchedulerParamKey> make_table() {
  const std::vector<T> warmup = {T::WarmupLR, T::WarmupDecayLR};
  const std::vector<T> any_warmup = {T::WarmupLR, T::WarmupDecayLR, T::WarmupCosineLR};
  const std::vector<T> total = {T::WarmupDecayLR, T::WarmupCosineLR};
  const std::vector<T> cycle = {T::OneCycle};
  const std::vector<T> range = {T::LRRangeTest};
  std::vector<SchedulerParamKey> t = {
      row("warmup_min_lr", warmup, K::Number, D::Value, 0, "0", 0, kInf, A::Zero, "resolved (auto: 0)"),
      row("warmup_max_lr", {T::WarmupLR}, K::Number, D::OptimizerLr, 0, "the optimizer's lr", 0, kInf,
          A::OptimizerLr, "resolved (auto: the optimizer's lr)"),
      row("warmup_max_lr", {T::WarmupDecayLR}, K::Number, D::Value, 0.001, "0.001 (DeepSpeed's WarmupDecayLR default)",
          0, kInf, A::OptimizerLr, "resolved (auto: the optimizer's lr)"),
      row("warmup_num_steps", any_warmup, K::Steps, D::Value, 1000, "1000", 0, kInf, A::WarmupSteps,
          "resolved (auto: the run's warmup_steps or warmup_ratio, 0 when neither is set, as HF's integration "
          "writes it); below 2 counts as 2, as in DeepSpeed"),
      row("warmup_type", any_warmup, K::WarmupType, D::Value, 0, "log", 0, 1, A::None,
          "resolved: log or linear (DeepSpeed falls back to log on other names; refused here)"),
      row("total_num_steps", total, K::Steps, D::Required, 0, "required", 1, kInf, A::TotalSteps,
          "resolved (auto: the run's optimizer steps); at least 1"),
      row("warmup_min_ratio", {T::WarmupCosineLR}, K::Number, D::Value, 0, "0", 0, 1, A::None, "resolved; in [0, 1]"),
      row("cos_min_ratio", {T::WarmupCosineLR}, K::Number, D::Value, 1e-4, "1e-4", 0, 1, A::None,
          "resolved; in [0, 1]"),
      row("cycle_min_lr", cycle, K::Number, D::Required, 0, "required", 0, kInf, A::None, "resolved"),
      row("cycle_max_lr", cycle, K::Number, D::Required, 0, "required", 0, kInf, A::None, "resolved"),
      row("decay_lr_rate", cycle, K::Number, D::Value, 0, "0", 0, kInf, A::None,
          "resolved; >= 0 (a negative rate drives the lr through infinity to negative values)"),
      row("cycle_first_step_size", cycle, K::Steps, D::Value, 2000, "2000", 1, kInf, A::None, "resolved"),
      row("cycle_second_step_size", cycle, K::Steps, D::SameAs, 0, "cycle_first_step_size", 1, kInf, A::None,
          "resolved"),
      row("cycle_first_stair_count", cycle, K::Steps, D::Value, 0, "0 (no stairs)", 0, kInf, A::None, "resolved"),
      row("cycle_second_stair_count", cycle, K::Steps, D::SameAs, 0, "cycle_first_stair_count", 0, kInf, A::None,
          "resolved"),
      row("decay_step_size", cycle, K::Steps, D::Value, 0, "0 (no decay after the cycle)", 0, kInf, A::None,
          "resolved"),
      row("cycle_momentum", cycle, K::Bool, D::Value, 1, "true", 0, 1, A::None,
          "resolved (cycles beta1; beta2 is 0.99 meanwhile, as in DeepSpeed)"),
      row("cycle_min_mom", cycle, K::Number, D::Value, 0.8, "0.8", 0, 1, A::None, "resolved; in [0, 1) (Adam's beta1)"),
      row("cycle_max_mom", cycle, K::Number, D::Value, 0.9, "0.9", 0, 1, A::None, "resolved; in [0, 1) (Adam's beta1)"),
      row("decay_mom_rate", cycle, K::Number, D::Value, 0, "0", -kInf, kInf, A::None,
          "resolved; a rate that takes the momentum out of [0, 1) before the run's last step is refused at start"),
      row("lr_range_test_min_lr", range, K::Number, D::Value, 1e-3, "1e-3", 0, kInf, A::None, "resolved"),
      row("lr_range_test_step_size", range, K::Steps, D::Value, 2000, "2000", 1, kInf, A::None, "resolved"),
      row("lr_range_test_step_rate", range, K::Number, D::Value, 1.0, "1.0", 0, kInf, A::None,
          "resolved; >= 0 (a negative rate drives the lr below 0)"),
      row("lr_range_test_staircase", range, K::Bool, D::Value, 0, "false", 0, 1, A::None, "resolved"),
      row("last_batch_iteration", schedule_types(), K::Steps, D::Value, -1, "-1", -kInf, kInf, A::None,
          "refused (a resumed run takes the step from its checkpoint)"),
  };
  for (SchedulerParamKey& k : t) {
    if (k.key == "cycle_second_step_size") k.same_as = "cycle_first_step_size";
    if (k.key == "cycle_second_stair_count") k.same_as = "cycle_first_stair_count";
    if (k.key == "cycle_min_mom" || k.key == "cycle_max_mom") k.max_exclusive = true;
    if (k.key == "last_batch_iteration")
      k.refused = "not supported: the schedule resumes from the checkpoint's step; remove it";
  }
  return t;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

const char* schedule_type_name(ScheduleType t) {
  switch (t) {
    case T::WarmupLR:
      return "WarmupLR";
    case T::WarmupDecayLR:
      return "WarmupDecayLR";
    case T::WarmupCosineLR:
      return "WarmupCosineLR";
    case T::OneCycle:
      return "OneCycle";
    case T::LRRangeTest:
      return "LRRangeTest";
  }
  return "?";
}

const std::vector<ScheduleType>& schedule_types() {
  static const std::vector<ScheduleType> all = {T::WarmupLR, T::WarmupDecayLR, T::WarmupCosineLR, T::OneCycle,
                                                T::LRRangeTest};
  return all;
}

std::optional<ScheduleType> schedule_type_from_name(const std::string& name) {
  for (ScheduleType t : schedule_types())
    if (lower(name) == lower(schedule_type_name(t))) return t;
  return std::nullopt;
}

std::string schedule_type_list() {
  std::string s;
  for (ScheduleType t : schedule_types()) s += (s.empty() ? "" : ", ") + std::string(schedule_type_name(t));
  return s;
}

bool SchedulerParamKey::takes(ScheduleType t) const { return std::find(types.begin(), types.end(), t) != types.end(); }

const std::vector<SchedulerParamKey>& scheduler_param_keys() {
  static const std::vector<SchedulerParamKey> table = make_table();
  return table;
}

const SchedulerParamKey* scheduler_param(ScheduleType t, const std::string& key) {
  for (const SchedulerParamKey& k : scheduler_param_keys())
    if (k.key == key && k.takes(t)) return &k;
  return nullptr;
}

std::vector<std::string> scheduler_param_names(ScheduleType t) {
  std::vector<std::string> out;
  for (const SchedulerParamKey& k : scheduler_param_keys())
    if (k.takes(t)) out.push_back(k.key);
  return out;
}

std::string scheduler_range_error(const SchedulerParamKey& k, double v) {
  if (v >= k.min_value && (k.max_exclusive ? v < k.max_value : v <= k.max_value)) return "";
  if (k.kind == K::Steps && k.min_value == 1 && v < 1) return "must be a positive number of steps";
  if (std::isfinite(k.min_value) && std::isfinite(k.max_value))
    return "must be in [" + number_text(k.min_value) + ", " + number_text(k.max_value) + (k.max_exclusive ? ")" : "]");
  if (v < k.min_value) return "must be >= " + number_text(k.min_value);
  return "must be <= " + number_text(k.max_value);
}

std::string scheduler_param_keys_markdown() {
  std::string s = "| param | schedulers | default | status |\n|-------|------------|---------|--------|\n";
  for (const SchedulerParamKey& k : scheduler_param_keys()) {
    std::string types;
    if (k.types.size() == schedule_types().size()) {
      types = "all";
    } else {
      for (ScheduleType t : k.types) types += (types.empty() ? "" : ", ") + std::string(schedule_type_name(t));
    }
    const std::string dflt = k.default_rule == D::Required ? "**required**"
                             : k.default_rule == D::SameAs ? "`" + k.same_as + "`"
                                                           : k.default_text;
    s += "| `" + k.key + "` | " + types + " | " + dflt + " | " + k.doc + " |\n";
  }
  return s;
}

}  // namespace zt::config
