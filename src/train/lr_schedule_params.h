// Reads a ds_config scheduler "params" object the way DeepSpeed's constructors take
// keyword arguments: each schedule asks for its parameters by name (with DeepSpeed's
// default), and finish() then rejects any key no one asked for, naming it and the valid
// names. Errors read "<source>: scheduler.params.<key>: <what>; <fix>".
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt::train {

class ScheduleParams {
 public:
  ScheduleParams(const nlohmann::json& params, std::string source, std::string type);

  bool has(const std::string& key) const { return params_.contains(key); }
  bool is_auto(const std::string& key) const;
  // Absent -> nullopt. "auto" is an error unless the caller checked is_auto() first.
  std::optional<double> number(const std::string& key);
  // Integers accept integral floats (1e3) as JSON writers produce them.
  std::optional<int64_t> integer(const std::string& key);
  std::optional<bool> boolean(const std::string& key);
  std::optional<std::string> string(const std::string& key);
  // Marks a key as known without reading it (e.g. after handling "auto").
  void accept(const std::string& key) { known_.insert(key); }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  // Throws for the first key that was not read.
  void finish() const;

 private:
  const nlohmann::json* get(const std::string& key);
  const nlohmann::json& params_;
  std::string source_, type_;
  std::set<std::string> known_;
};

}  // namespace zt::train
