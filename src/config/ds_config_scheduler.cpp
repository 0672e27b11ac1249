// ds_config "scheduler": only validated here (type, parameter names and types); the
// schedules themselves live in lr_schedule*, which reads the block kept in TrainConfig.
#include <algorithm>

#include "core/error.h"
#include "config/ds_config.h"

namespace zt::train {

using nlohmann::json;

namespace {

enum class Kind { Number, Bool, WarmupType };

struct Param {
  const char* name;
  Kind kind;
  AutoOk auto_ok;
};

struct Schedule {
  const char* type;
  std::vector<Param> params;
  std::vector<std::string> required;
};

const std::vector<Schedule>& schedules() {
  static const Param kWarm[] = {{"warmup_min_lr", Kind::Number, AutoOk::Yes},
                                {"warmup_max_lr", Kind::Number, AutoOk::Yes},
                                {"warmup_num_steps", Kind::Number, AutoOk::Yes},
                                {"warmup_type", Kind::WarmupType, AutoOk::No},
                                {"last_batch_iteration", Kind::Number, AutoOk::No}};
  static const std::vector<Schedule> all = {
      {"WarmupLR", {kWarm[0], kWarm[1], kWarm[2], kWarm[3], kWarm[4]}, {}},
      {"WarmupDecayLR",
       {kWarm[0], kWarm[1], kWarm[2], kWarm[3], kWarm[4], {"total_num_steps", Kind::Number, AutoOk::Yes}},
       {"total_num_steps"}},
      {"WarmupCosineLR",
       {{"total_num_steps", Kind::Number, AutoOk::Yes},
        {"warmup_min_ratio", Kind::Number, AutoOk::No},
        {"warmup_num_steps", Kind::Number, AutoOk::Yes},
        {"cos_min_ratio", Kind::Number, AutoOk::No},
        kWarm[3],
        kWarm[4]},
       {"total_num_steps"}},
      {"OneCycle",
       {{"cycle_min_lr", Kind::Number, AutoOk::No},
        {"cycle_max_lr", Kind::Number, AutoOk::No},
        {"decay_lr_rate", Kind::Number, AutoOk::No},
        {"cycle_first_step_size", Kind::Number, AutoOk::No},
        {"cycle_second_step_size", Kind::Number, AutoOk::No},
        {"cycle_first_stair_count", Kind::Number, AutoOk::No},
        {"cycle_second_stair_count", Kind::Number, AutoOk::No},
        {"decay_step_size", Kind::Number, AutoOk::No},
        {"cycle_momentum", Kind::Bool, AutoOk::No},
        {"cycle_min_mom", Kind::Number, AutoOk::No},
        {"cycle_max_mom", Kind::Number, AutoOk::No},
        {"decay_mom_rate", Kind::Number, AutoOk::No},
        kWarm[4]},
       {"cycle_min_lr", "cycle_max_lr"}},
      {"LRRangeTest",
       {{"lr_range_test_min_lr", Kind::Number, AutoOk::No},
        {"lr_range_test_step_size", Kind::Number, AutoOk::No},
        {"lr_range_test_step_rate", Kind::Number, AutoOk::No},
        {"lr_range_test_staircase", Kind::Bool, AutoOk::No},
        kWarm[4]},
       {}},
  };
  return all;
}

}  // namespace

json validate_scheduler(const json& block, const Where& w) {
  check_known_keys(block, {"type", "params"}, w, "a scheduler block is {\"type\": ..., \"params\": {...}}");
  const std::string type = read_string(block, "type", w, "").value;
  std::vector<std::string> names;
  const Schedule* found = nullptr;
  for (const auto& s : schedules()) {
    names.push_back(s.type);
    if (lower(type) == lower(s.type)) found = &s;
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  if (type.empty()) ZT_THROW_INPUT(w.key("type").str(), ": missing; write one of ", list);
  if (!found)
    ZT_THROW_INPUT(w.key("type").str(), ": unknown scheduler '", type, "'", did_you_mean(type, names),
                   "; supported: ", list);
  json out = {{"type", found->type}, {"params", json::object()}};
  const Where pw = w.key("params");
  const json params = block.contains("params") && !block["params"].is_null() ? block["params"] : json::object();
  std::vector<std::string> known;
  for (const auto& p : found->params) known.push_back(p.name);
  check_known_keys(params, known, pw,
                   std::string("valid params for ") + found->type + ": see docs/configs.md#scheduler");
  for (const auto& p : found->params) {
    auto it = params.find(p.name);
    if (it == params.end() || it->is_null()) continue;
    const Where kw = pw.key(p.name);
    if (is_auto(*it)) {
      if (p.auto_ok == AutoOk::No) ZT_THROW_INPUT(kw.str(), ": \"auto\" is not resolvable for this key; write a value");
      out["params"][p.name] = "auto";
      continue;
    }
    switch (p.kind) {
      case Kind::Number: {
        // Step counts stay integers even when written 1e3 or "1000" (YAML).
        const double v = to_number(*it, kw);
        const std::string n = p.name;
        const bool count = n.find("rate") == std::string::npos &&
                           (n.find("step") != std::string::npos || n.find("count") != std::string::npos ||
                            n.find("iteration") != std::string::npos);
        if (count && v == static_cast<double>(static_cast<int64_t>(v))) {
          out["params"][p.name] = static_cast<int64_t>(v);
        } else {
          out["params"][p.name] = v;
        }
        break;
      }
      case Kind::Bool:
        out["params"][p.name] = to_bool(*it, kw);
        break;
      case Kind::WarmupType: {
        const std::string v = read_string(params, p.name, pw, "").value;
        if (v != "log" && v != "linear")
          ZT_THROW_INPUT(kw.str(), ": '", v, "' is not one of log, linear", did_you_mean(v, {"log", "linear"}));
        out["params"][p.name] = v;
        break;
      }
    }
  }
  for (const auto& r : found->required)
    if (!out["params"].contains(r))
      ZT_THROW_INPUT(pw.key(r).str(), ": required by ", found->type,
                     "; give a value (or \"auto\" to take it from the run)");
  return out;
}

}  // namespace zt::train
