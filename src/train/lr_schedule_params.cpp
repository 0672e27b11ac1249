#include "train/lr_schedule_params.h"

#include <cmath>

#include "core/error.h"

namespace zt::train {

ScheduleParams::ScheduleParams(const nlohmann::json& params, std::string source, std::string type)
    : params_(params), source_(std::move(source)), type_(std::move(type)) {
  if (!params_.is_object())
    ZT_THROW_INPUT(source_, ": scheduler.params: expected an object of ", type_, " parameters, got ",
                   params_.type_name());
}

bool ScheduleParams::is_auto(const std::string& key) const {
  const auto it = params_.find(key);
  return it != params_.end() && it->is_string() && it->get<std::string>() == "auto";
}

void ScheduleParams::fail(const std::string& key, const std::string& what) const {
  ZT_THROW_INPUT(source_, ": scheduler.params.", key, ": ", what);
}

const nlohmann::json* ScheduleParams::get(const std::string& key) {
  known_.insert(key);
  const auto it = params_.find(key);
  if (it == params_.end() || it->is_null()) return nullptr;
  if (is_auto(key))
    fail(key, "\"auto\" cannot be resolved here; write a value (HF Trainer/Accelerate fill it from the run)");
  return &*it;
}

std::optional<double> ScheduleParams::number(const std::string& key) {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number() || v->is_boolean()) fail(key, "expected a number, got " + v->dump());
  const double d = v->get<double>();
  if (!std::isfinite(d)) fail(key, "expected a finite number, got " + v->dump());
  return d;
}

std::optional<int64_t> ScheduleParams::integer(const std::string& key) {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) return static_cast<int64_t>(d);
  }
  fail(key, "expected an integer, got " + v->dump());
}

std::optional<bool> ScheduleParams::boolean(const std::string& key) {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
  return v->get<bool>();
}

std::optional<std::string> ScheduleParams::string(const std::string& key) {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail(key, "expected a string, got " + v->dump());
  return v->get<std::string>();
}

void ScheduleParams::finish() const {
  for (const auto& item : params_.items()) {
    if (known_.count(item.key())) continue;
    std::string valid;
    for (const auto& k : known_) valid += (valid.empty() ? "" : ", ") + k;
    fail(item.key(), "unknown parameter of " + type_ + "; valid parameters: " + valid);
  }
}

}  // namespace zt::train
