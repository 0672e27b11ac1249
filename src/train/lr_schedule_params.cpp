#include "train/lr_schedule_params.h"

#include <cmath>

#include "core/error.h"

namespace zt::train {

ScheduleParams::ScheduleParams(const nlohmann::json& params, std::string source, config::ScheduleType type,
                               double optimizer_lr, const ScheduleRun& run)
    : params_(params), source_(std::move(source)), type_(type), optimizer_lr_(optimizer_lr), run_(run) {
  if (!params_.is_object())
    ZT_THROW_INPUT(source_, ": scheduler.params: expected an object of ", config::schedule_type_name(type_),
                   " parameters, got ", params_.type_name());
  for (const auto& item : params_.items()) {
    const config::SchedulerParamKey* k = config::scheduler_param(type_, item.key());
    if (!k) {
      std::string valid;
      for (const std::string& n : config::scheduler_param_names(type_)) valid += (valid.empty() ? "" : ", ") + n;
      fail(item.key(), std::string("unknown parameter of ") + config::schedule_type_name(type_) + "; valid parameters: " + valid);
    }
    if (!k->refused.empty() && !item.value().is_null()) fail(k->key, k->refused);
  }
}

void ScheduleParams::fail(const std::string& key, const std::string& what) const {
  ZT_THROW_INPUT(source_, ": scheduler.params.", key, ": ", what);
}

const config::SchedulerParamKey& ScheduleParams::row(const std::string& key) const {
  const config::SchedulerParamKey* k = config::scheduler_param(type_, key);
  ZT_CHECK(k != nullptr, config::schedule_type_name(type_), " reads '", key, "', which its params table lacks");
  return *k;
}

const nlohmann::json* ScheduleParams::written(const config::SchedulerParamKey& k, nlohmann::json* resolved) const {
  const auto it = params_.find(k.key);
  if (it == params_.end() || it->is_null()) {
    if (k.default_rule == config::SchedulerDefault::Required)
      fail(k.key, std::string("required by ") + config::schedule_type_name(type_) + "; give a value");
    return nullptr;
  }
  if (!(it->is_string() && it->get<std::string>() == "auto")) return &*it;
  const auto from_run = [&](int64_t v, const char* what) {
    if (v < 0) fail(k.key, std::string("\"auto\" needs the run's ") + what + ", which is not known here; write a number");
    return nlohmann::json(v);
  };
  switch (k.auto_rule) {
    case config::SchedulerAuto::None:
      fail(k.key, "\"auto\" cannot be resolved for this key; write a value");
    case config::SchedulerAuto::Zero:
      *resolved = 0.0;
      break;
    case config::SchedulerAuto::OptimizerLr:
      *resolved = optimizer_lr_;
      break;
    case config::SchedulerAuto::WarmupSteps:
      *resolved = from_run(run_.warmup_steps, "warmup steps");
      break;
    case config::SchedulerAuto::TotalSteps:
      *resolved = from_run(run_.total_steps, "total optimizer steps");
      break;
  }
  return resolved;
}

double ScheduleParams::checked(const config::SchedulerParamKey& k, double v) const {
  const std::string range = config::scheduler_range_error(k, v);
  if (!range.empty()) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", v);
    fail(k.key, range + ", got " + got);
  }
  return v;
}

double ScheduleParams::number(const std::string& key) const {
  const config::SchedulerParamKey& k = row(key);
  nlohmann::json resolved;
  const nlohmann::json* v = written(k, &resolved);
  if (!v) {
    if (k.default_rule == config::SchedulerDefault::OptimizerLr) return optimizer_lr_;
    if (k.default_rule == config::SchedulerDefault::SameAs) return number(k.same_as);
    return k.default_value;
  }
  if (!v->is_number() || v->is_boolean()) fail(key, "expected a number, got " + v->dump());
  const double d = v->get<double>();
  if (!std::isfinite(d)) fail(key, "expected a finite number, got " + v->dump());
  return checked(k, d);
}

int64_t ScheduleParams::steps(const std::string& key) const {
  const config::SchedulerParamKey& k = row(key);
  nlohmann::json resolved;
  const nlohmann::json* v = written(k, &resolved);
  if (!v) {
    if (k.default_rule == config::SchedulerDefault::SameAs) return steps(k.same_as);
    return static_cast<int64_t>(k.default_value);
  }
  int64_t n = 0;
  if (v->is_number_integer()) {
    n = v->get<int64_t>();
  } else {
    const double d = v->is_number_float() ? v->get<double>() : NAN;
    if (!(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18))
      fail(key, "expected a whole number of steps, got " + v->dump());
    n = static_cast<int64_t>(d);
  }
  checked(k, static_cast<double>(n));
  return n;
}

bool ScheduleParams::boolean(const std::string& key) const {
  const config::SchedulerParamKey& k = row(key);
  nlohmann::json resolved;
  const nlohmann::json* v = written(k, &resolved);
  if (!v) return k.default_value != 0;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
  return v->get<bool>();
}

std::string ScheduleParams::choice(const std::string& key) const {
  const config::SchedulerParamKey& k = row(key);
  nlohmann::json resolved;
  const nlohmann::json* v = written(k, &resolved);
  if (!v) return k.default_value == 0 ? "log" : "linear";
  if (!v->is_string()) fail(key, "expected a string, got " + v->dump());
  const std::string s = v->get<std::string>();
  // DeepSpeed falls back to log with a warning for unknown names; a typo should not
  // silently change the schedule, so it is refused.
  if (s != "log" && s != "linear") fail(key, "unknown warmup type \"" + s + "\"; use \"log\" or \"linear\"");
  return s;
}

}  // namespace zt::train
