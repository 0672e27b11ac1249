// The ds_config "scheduler.params" table: one row per (param, schedules) with its kind,
// DeepSpeed's default, range, "auto" rule and doc. Everything about a scheduler param
// derives from its row: the load-time validation (known keys per type with did-you-mean,
// numeric strings, required params, ranges, refusals; ds_config_scheduler.cpp), the "auto"
// resolution (ds_config_resolve.cpp, run_config_load.cpp's set_total_steps), the values
// and defaults the schedules read (train/lr_schedule_params.h) and the docs/configs.md
// table (`zerotrain config keys --markdown scheduler`).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace zt::config {

// DeepSpeed's schedules (deepspeed/runtime/lr_schedules.py), in their canonical spelling.
enum class ScheduleType { WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest };

const char* schedule_type_name(ScheduleType t);
// Case-insensitive ("warmuplr" -> WarmupLR); nullopt when unknown.
std::optional<ScheduleType> schedule_type_from_name(const std::string& name);
const std::vector<ScheduleType>& schedule_types();
std::string schedule_type_list();  // "WarmupLR, WarmupDecayLR, ..."

enum class SchedulerParamKind {
  Number,      // a float
  Steps,       // a whole number of steps (written 1000, 1e3 or "1000")
  Bool,
  WarmupType,  // "log" or "linear"
};

// Where a param's default comes from when the block leaves it out.
enum class SchedulerDefault {
  Value,        // default_value
  OptimizerLr,  // the optimizer's resolved lr (WarmupLR's warmup_max_lr)
  SameAs,       // the value of the param named by same_as (OneCycle's second half)
  Required,     // none: the block must give it
};

// What "auto" becomes (HF Trainer / Accelerate fill these from the run).
enum class SchedulerAuto { None, Zero, OptimizerLr, WarmupSteps, TotalSteps };

struct SchedulerParamKey {
  std::string key;
  std::vector<ScheduleType> types;  // the schedules that take it (others: unknown key)
  SchedulerParamKind kind;
  SchedulerDefault default_rule;
  double default_value;  // SchedulerDefault::Value (bools 0/1; WarmupType: 0 log, 1 linear)
  std::string same_as;   // SchedulerDefault::SameAs
  std::string default_text;
  double min_value;      // a smaller value is an error
  double max_value;      // a larger value is an error
  SchedulerAuto auto_rule;
  std::string refused;   // non-empty: giving the param is an error with this fix
  std::string doc;       // docs/configs.md's status column
  bool max_exclusive = false;  // the range is [min, max): a momentum (Adam's beta1 < 1)
  bool takes(ScheduleType t) const;
};

const std::vector<SchedulerParamKey>& scheduler_param_keys();
// The row of `key` for schedule `t`; nullptr when `t` does not take it.
const SchedulerParamKey* scheduler_param(ScheduleType t, const std::string& key);
// The params schedule `t` takes, in table order.
std::vector<std::string> scheduler_param_names(ScheduleType t);
// "" when `v` is in the row's range, else what is wrong ("must be >= 0").
std::string scheduler_range_error(const SchedulerParamKey& k, double v);
// docs/configs.md's scheduler table.
std::string scheduler_param_keys_markdown();

}  // namespace zt::config
