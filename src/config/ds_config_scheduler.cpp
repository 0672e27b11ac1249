// ds_config "scheduler": validated here from the params table (config/scheduler_keys.h)
// and kept in TrainConfig in canonical form; the schedules themselves live in
// train/lr_schedule*, which read that block through the same table.
#include <cmath>

#include "config/ds_config.h"
#include "config/scheduler_keys.h"
#include "core/error.h"

namespace zt::config {

using nlohmann::json;

namespace {

// One param's value, canonical: numbers as numbers (steps as integers), YAML-style booleans
// as booleans, "auto" kept for resolve_scheduler.
json canonical_value(const SchedulerParamKey& k, const json& v, const Where& kw) {
  if (!k.refused.empty()) ZT_THROW_INPUT(kw.str(), ": ", k.refused);
  if (is_auto(v)) {
    if (k.auto_rule == SchedulerAuto::None)
      ZT_THROW_INPUT(kw.str(), ": \"auto\" is not resolvable for this key; write a value");
    return "auto";
  }
  switch (k.kind) {
    case SchedulerParamKind::Number:
    case SchedulerParamKind::Steps: {
      const double d = to_number(v, kw);
      const std::string range = scheduler_range_error(k, d);
      if (!range.empty()) ZT_THROW_INPUT(kw.str(), ": ", range, ", got ", v.dump());
      if (k.kind == SchedulerParamKind::Number) return d;
      if (d != std::floor(d) || std::fabs(d) > 9e18)
        ZT_THROW_INPUT(kw.str(), ": expected a whole number of steps, got ", v.dump());
      return static_cast<int64_t>(d);
    }
    case SchedulerParamKind::Bool:
      return to_bool(v, kw);
    case SchedulerParamKind::WarmupType: {
      if (!v.is_string()) ZT_THROW_INPUT(kw.str(), ": expected \"log\" or \"linear\", got ", v.dump());
      const std::string s = v.get<std::string>();
      if (s != "log" && s != "linear")
        ZT_THROW_INPUT(kw.str(), ": '", s, "' is not one of log, linear", did_you_mean(s, {"log", "linear"}));
      return s;
    }
  }
  return v;
}

}  // namespace

json validate_scheduler(const json& block, const Where& w) {
  check_known_keys(block, {"type", "params"}, w, "a scheduler block is {\"type\": ..., \"params\": {...}}");
  const std::string type_text = read_string(block, "type", w, "").value;
  std::vector<std::string> names;
  for (ScheduleType t : schedule_types()) names.push_back(schedule_type_name(t));
  if (type_text.empty()) ZT_THROW_INPUT(w.key("type").str(), ": missing; write one of ", schedule_type_list());
  const std::optional<ScheduleType> type = schedule_type_from_name(type_text);
  if (!type)
    ZT_THROW_INPUT(w.key("type").str(), ": unknown scheduler '", type_text, "'", did_you_mean(type_text, names),
                   "; supported: ", schedule_type_list());
  json out = {{"type", schedule_type_name(*type)}, {"params", json::object()}};
  const Where pw = w.key("params");
  const json params = block.contains("params") && !block["params"].is_null() ? block["params"] : json::object();
  require_object(params, pw);
  check_known_keys(params, scheduler_param_names(*type),
                   pw, std::string("valid params for ") + schedule_type_name(*type) + ": see docs/configs.md#scheduler");
  for (const auto& item : params.items()) {
    if (item.value().is_null()) continue;
    const SchedulerParamKey& k = *scheduler_param(*type, item.key());
    out["params"][k.key] = canonical_value(k, item.value(), pw.key(k.key));
  }
  for (const std::string& name : scheduler_param_names(*type)) {
    const SchedulerParamKey& k = *scheduler_param(*type, name);
    if (k.default_rule == SchedulerDefault::Required && !out["params"].contains(name))
      ZT_THROW_INPUT(pw.key(name).str(), ": required by ", schedule_type_name(*type), "; give a value",
                     k.auto_rule == SchedulerAuto::None ? "" : " (or \"auto\" to take it from the run)");
  }
  return out;
}

}  // namespace zt::config
