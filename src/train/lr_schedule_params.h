// Reads a ds_config scheduler "params" object through the params table
// (config/scheduler_keys.h): each schedule asks for its parameters by name and gets the
// written value, "auto" resolved from the run, or the row's default (DeepSpeed's), each
// checked against the row's kind and range. The constructor rejects keys the schedule does
// not take and refused ones; a required param left out fails where it is read. Errors
// read "<source>: scheduler.params.<key>: <what>; <fix>".
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/scheduler_keys.h"
#include "train/lr_schedule.h"

namespace zt::train {

class ScheduleParams {
 public:
  ScheduleParams(const nlohmann::json& params, std::string source, config::ScheduleType type, double optimizer_lr,
                 const ScheduleRun& run);

  double number(const std::string& key) const;
  // Whole numbers; integral floats (1e3) as JSON writers produce them are accepted.
  int64_t steps(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string choice(const std::string& key) const;  // a WarmupType param: "log" / "linear"

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const config::SchedulerParamKey& row(const std::string& key) const;
  // The written value ("auto" resolved), or nullptr when absent (the default applies).
  const nlohmann::json* written(const config::SchedulerParamKey& k, nlohmann::json* resolved) const;
  double checked(const config::SchedulerParamKey& k, double v) const;

  const nlohmann::json& params_;
  std::string source_;
  config::ScheduleType type_;
  double optimizer_lr_;
  ScheduleRun run_;
};

}  // namespace zt::train
