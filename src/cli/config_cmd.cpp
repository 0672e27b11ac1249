// zerotrain config check FILE... [--deepspeed ds.json] [--config_file acc.yaml]
// [--key value ...]: loads and resolves configs exactly as `zerotrain train` would, without
// training, and prints every resolved value with where it came from.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "config/accelerate_config.h"
#include "config/config_dump.h"
#include "config/config_keys.h"
#include "config/config_paths.h"
#include "config/config_value.h"
#include "config/ds_config.h"
#include "config/hf_training_args.h"
#include "config/run_config.h"
#include "config/scheduler_keys.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: zerotrain config check [FILE...] [--deepspeed DS.json] [--config_file ACCELERATE.yaml]
                              [--world_size N] [--section.key VALUE ...]
       zerotrain config keys [--markdown] [top|zero_optimization|activation_checkpointing|aio|fp16|bf16|optimizer|accelerate|
                                        accelerate.deepspeed_config|run|hf_training_args]

Validates configs without training and prints the resolved configuration (every value
the run would use, with its origin: default, a file, auto, command line).

FILEs are recognised by their keys: an Accelerate YAML (distributed_type, deepspeed_config,
...), a DeepSpeed ds_config.json (zero_optimization, train_batch_size, ...), or a run
config (model, data, max_steps, learning_rate, ...). --section.key VALUE overrides a key of
whichever document owns it, as for `zerotrain train`. --world_size sets the number of
data-parallel processes for the batch-size rule (default: the Accelerate YAML's
num_processes, else 1).

It also checks that the files and directories the config names exist (model.path,
model.tokenizer, data.train, data.validation; the ds_config and Accelerate YAML are read).

`config keys` prints the key tables (key, aliases, default, status) as docs/configs.md
shows them.

Exit code 2 with a message naming the file, key and fix when a config is invalid.
See docs/configs.md for every key.
)";

bool any_key_in(const nlohmann::json& doc, const std::vector<std::string>& keys) {
  for (const auto& kv : doc.items())
    for (const auto& k : keys)
      if (kv.key() == k) return true;
  return false;
}

// Which kind of config a file is, from its keys.
enum class Kind { Run, DeepSpeed, Accelerate };

Kind classify(const std::string& path) {
  const nlohmann::json doc = config::load_document(path);
  if (any_key_in(doc, {"compute_environment", "distributed_type", "deepspeed_config", "fsdp_config", "num_processes",
                       "mixed_precision", "num_machines", "main_process_port"}))
    return Kind::Accelerate;
  bool all_ds = !doc.empty();
  bool any_run_only = false;
  const auto& ds = config::ds_top_level_keys();
  const auto& run = config::run_top_level_keys();
  for (const auto& kv : doc.items()) {
    const bool in_ds = std::find(ds.begin(), ds.end(), kv.key()) != ds.end();
    const bool in_run = std::find(run.begin(), run.end(), kv.key()) != run.end();
    all_ds = all_ds && in_ds;
    any_run_only = any_run_only || (in_run && !in_ds);
  }
  return all_ds && !any_run_only ? Kind::DeepSpeed : Kind::Run;
}

int run_check(const Args& args) {
  Args load_args;
  config::LoadOptions options;
  int files = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--world_size" || a == "--world-size" || a.rfind("--world_size=", 0) == 0) {
      std::string v;
      if (a.find('=') != std::string::npos) {
        v = a.substr(a.find('=') + 1);
      } else {
        if (i + 1 >= args.size()) ZT_THROW_INPUT(a, " needs a value");
        v = args[++i];
      }
      options.world_size = static_cast<int>(parse_int("--world_size", v));  // as the launcher would give it
      if (options.world_size < 1) ZT_THROW_INPUT("--world_size must be at least 1");
      continue;
    }
    if (a.rfind("--", 0) == 0) {
      load_args.push_back(a);
      // The value of --key VALUE travels with it.
      if (a.find('=') == std::string::npos && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        load_args.push_back(args[++i]);
      continue;
    }
    ++files;
    switch (classify(a)) {
      case Kind::Accelerate:
        load_args.insert(load_args.end(), {"--config_file", a});
        break;
      case Kind::DeepSpeed:
        load_args.insert(load_args.end(), {"--deepspeed", a});
        break;
      case Kind::Run:
        load_args.push_back(a);
        break;
    }
  }
  if (files == 0 && load_args.empty())
    ZT_THROW_INPUT("config check needs at least one config file; see 'zerotrain config --help'");
  const config::TrainConfig cfg = config::load_train_config(load_args, options);
  config::check_named_paths(cfg);
  std::fputs(config::describe_config(cfg).c_str(), stdout);
  std::printf("\nconfig OK\n");
  return 0;
}

// zerotrain config keys [--markdown] [SECTION]: the key tables, as docs/configs.md shows
// them (the doc is checked against this output by a test).
struct KeyTable {
  const char* section;
  std::string (*markdown)();
};
const KeyTable kKeyTables[] = {{"top", config::top_level_keys_markdown},
                               {"zero_optimization", config::zero_keys_markdown},
                               {"activation_checkpointing", config::checkpointing_keys_markdown},
                               {"aio", config::aio_keys_markdown},
                               {"fp16", config::fp16_keys_markdown},
                               {"bf16", config::bf16_keys_markdown},
                               {"optimizer", config::optimizer_param_keys_markdown},
                               {"scheduler", config::scheduler_param_keys_markdown},
                               {"accelerate", config::accelerate_keys_markdown},
                               {"accelerate.deepspeed_config", config::accelerate_deepspeed_keys_markdown},
                               {"run", config::run_keys_markdown},
                               {"hf_training_args", config::hf_training_args_markdown}};

int run_keys(const Args& args) {
  std::string section;
  for (const std::string& a : args) {
    if (a == "--markdown") continue;  // the only format
    const bool known =
        std::any_of(std::begin(kKeyTables), std::end(kKeyTables), [&](const KeyTable& t) { return a == t.section; });
    if (!section.empty() || !known) {
      std::string sections;
      for (const KeyTable& t : kKeyTables) sections += (sections.empty() ? "" : "|") + std::string(t.section);
      ZT_THROW_INPUT("zerotrain config keys: unknown argument '", a, "'; usage: zerotrain config keys [--markdown] [",
                     sections, "]");
    }
    section = a;
  }
  for (const KeyTable& t : kKeyTables) {
    if (!section.empty() && section != t.section) continue;
    if (section.empty()) std::printf("### %s\n\n", t.section);
    std::printf("%s%s", t.markdown().c_str(), section.empty() ? "\n" : "");
  }
  return 0;
}

int run_config(const Args& args) {
  const std::string action = args.empty() ? std::string() : args[0];
  if (action == "check") return run_check(Args(args.begin() + 1, args.end()));
  if (action == "keys") return run_keys(Args(args.begin() + 1, args.end()));
  const std::string got = args.empty() ? std::string("nothing") : "'" + args[0] + "'";
  ZT_THROW_INPUT("zerotrain config: expected the action 'check' or 'keys', got ", got,
                 "; usage: zerotrain config check FILE... | zerotrain config keys --markdown");
}

const Registrar registrar{
    {"config",
     "check configs (ds_config.json, Accelerate YAML, run config) and print the resolved values; list the keys",
     run_config, kHelp}};

}  // namespace
}  // namespace zt::cli
