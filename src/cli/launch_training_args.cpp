#include "cli/launch_training_args.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace zt::cli {

namespace fs = std::filesystem;
using Words = std::vector<std::string>;

namespace {

// (launch flag, training command key, value) of every flag given, in a fixed order.
struct Setting {
  std::string flag, key, value;
};

bool uses_deepspeed(const AccelerateTrainingFlags& f) {
  return f.use_deepspeed || f.zero_stage >= 0 || f.gradient_accumulation_steps > 0 || !f.gradient_clipping.empty() ||
         !f.offload_optimizer_device.empty() || !f.offload_param_device.empty() || !f.deepspeed_config_file.empty();
}

std::vector<Setting> settings_of(const AccelerateTrainingFlags& f) {
  std::vector<Setting> s;
  // Accelerate's DeepSpeed flags configure its DeepSpeed plugin: they mean --use_deepspeed.
  if (uses_deepspeed(f)) s.push_back({"--use_deepspeed", "distributed_type", "DEEPSPEED"});
  if (f.use_cpu) s.push_back({"--cpu", "use_cpu", "true"});
  if (!f.mixed_precision.empty()) s.push_back({"--mixed_precision", "mixed_precision", f.mixed_precision});
  const std::string ds = "deepspeed_config.";
  if (!f.deepspeed_config_file.empty())
    s.push_back({"--deepspeed_config_file", ds + "deepspeed_config_file", f.deepspeed_config_file});
  if (f.zero_stage >= 0) s.push_back({"--zero_stage", ds + "zero_stage", std::to_string(f.zero_stage)});
  if (f.gradient_accumulation_steps > 0)
    s.push_back({"--gradient_accumulation_steps", ds + "gradient_accumulation_steps",
                 std::to_string(f.gradient_accumulation_steps)});
  if (!f.gradient_clipping.empty()) s.push_back({"--gradient_clipping", ds + "gradient_clipping", f.gradient_clipping});
  if (!f.offload_optimizer_device.empty())
    s.push_back({"--offload_optimizer_device", ds + "offload_optimizer_device", f.offload_optimizer_device});
  if (!f.offload_param_device.empty())
    s.push_back({"--offload_param_device", ds + "offload_param_device", f.offload_param_device});
  return s;
}

// The value the command gives --KEY: the word after it (or after '='), "true" for a bare
// switch, as `zerotrain train` reads its overrides.
std::optional<std::string> command_value(const Words& command, const std::string& key) {
  const std::string flag = "--" + key;
  for (size_t i = 2; i < command.size(); ++i) {
    if (command[i].rfind(flag + "=", 0) == 0) return command[i].substr(flag.size() + 1);
    if (command[i] != flag) continue;
    if (i + 1 < command.size() && command[i + 1].rfind("--", 0) != 0) return command[i + 1];
    return std::string("true");
  }
  return std::nullopt;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
}

}  // namespace

bool AccelerateTrainingFlags::any() const { return !settings_of(*this).empty(); }

std::string AccelerateTrainingFlags::describe() const {
  std::string s;
  for (const Setting& x : settings_of(*this)) {
    if (x.flag == "--use_deepspeed" && !use_deepspeed) continue;  // implied, not written
    s += (s.empty() ? "" : " ") + x.flag + (x.flag == "--use_deepspeed" || x.flag == "--cpu" ? "" : " " + x.value);
  }
  return s;
}

void check_training_flag_values(const AccelerateTrainingFlags& f) {
  const auto one_of = [](const std::string& flag, const std::string& v, const Words& allowed) {
    if (v.empty() || std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    ZT_THROW_INPUT(flag, " '", v, "' is not one of ", list);
  };
  if (f.mixed_precision == "fp8")
    ZT_THROW_INPUT("--mixed_precision fp8: fp8 training is not supported; use bf16 or fp16");
  one_of("--mixed_precision", f.mixed_precision, {"no", "fp16", "bf16"});
  one_of("--offload_optimizer_device", f.offload_optimizer_device, {"none", "cpu", "nvme"});
  one_of("--offload_param_device", f.offload_param_device, {"none", "cpu", "nvme"});
  if (f.zero_stage > 3) ZT_THROW_INPUT("--zero_stage must be 0, 1, 2 or 3, got ", f.zero_stage);
  if (!f.gradient_clipping.empty()) {
    char* end = nullptr;
    const double clip = std::strtod(f.gradient_clipping.c_str(), &end);
    if (*end != '\0' || !(clip >= 0))
      ZT_THROW_INPUT("--gradient_clipping '", f.gradient_clipping, "' is not a number >= 0");
  }
}

bool is_zerotrain_train(const Words& command) {
  return command.size() >= 2 && fs::path(command[0]).filename() == "zerotrain" && command[1] == "train";
}

Words command_with_training_settings(const Words& command, const AccelerateTrainingFlags& flags, const LaunchYaml& yaml,
                                     int world_size, std::vector<std::string>& notes) {
  const std::vector<Setting> settings = settings_of(flags);
  if (!is_zerotrain_train(command)) {
    const std::string program = command.empty() ? "" : command[0];
    if (!settings.empty())
      ZT_THROW_INPUT(flags.describe(),
                     ": these are training settings, which zerotrain launch passes to a `zerotrain "
                     "train` command only, and '",
                     program,
                     "' is not one; give them to the training command itself "
                     "(zerotrain train ... ",
                     flags.describe(), "), or launch `zerotrain train` directly");
    if (!yaml.path.empty() && !yaml.training_keys.empty()) {
      std::string keys;
      for (const auto& k : yaml.training_keys) keys += (keys.empty() ? "" : ", ") + k;
      notes.push_back(yaml.path + " sets " + keys + " for training, which reach a `zerotrain train` command only ('" +
                      program + "' is not one); give the file to the training command (zerotrain train --config_file " +
                      yaml.path + ")");
    }
    return command;
  }

  Words out = command;
  const auto append = [&](const std::string& key, const std::string& value, const std::string& from) {
    if (const auto own = command_value(command, key)) {
      if (*own == value) return;  // said twice, the same way
      ZT_THROW_INPUT(from, " sets ", key, " to ", value, " but the training command says --", key, " ", *own,
                     "; give it in one place");
    }
    out.insert(out.end(), {"--" + key, value});
  };
  if (!yaml.path.empty()) {
    const auto own = command_value(command, "config_file");
    if (own && !same_file(*own, yaml.path))
      ZT_THROW_INPUT("launch --config_file ", yaml.path, " and the training command's --config_file ", *own,
                     " name different Accelerate configs; give one of them");
    if (!own) out.insert(out.end(), {"--config_file", yaml.path});
    // The launch flags or the hostfile decided another process count: say so to the YAML's reader.
    if (yaml.num_processes && *yaml.num_processes != world_size)
      append("num_processes", std::to_string(world_size), "the launch (" + std::to_string(world_size) + " processes)");
  }
  for (const Setting& s : settings) {
    if (s.key == "deepspeed_config.deepspeed_config_file") {
      const auto own = command_value(command, "deepspeed");
      if (own && !same_file(*own, s.value))
        ZT_THROW_INPUT("launch --deepspeed_config_file ", s.value, " and the training command's --deepspeed ", *own,
                       " name different DeepSpeed configs; give one of them");
    }
    append(s.key, s.value, "launch " + s.flag);
  }
  return out;
}

}  // namespace zt::cli
