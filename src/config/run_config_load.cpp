// load_train_config: the `zerotrain train` command line -> documents -> overrides ->
// resolution. Each override goes to the document that owns its first key, so
// `--optimizer.params.lr 3e-4` edits the ds_config and `--max_steps 20` the run config,
// before anything is validated or resolved (errors then name the key as the user wrote it).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <variant>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "io/bounded_file.h"
#include "io/chat_template.h"
#include "model/config.h"
#include "config/accelerate_config.h"
#include "config/config_paths.h"
#include "config/config_keys.h"
#include "config/hf_training_args.h"
#include "config/run_config.h"
#include "config/run_lora.h"
#include "config/scheduler_keys.h"

namespace zt::config {

using nlohmann::json;

namespace {

const std::string kCommandLine = "command line";

struct Override {
  std::string key;  // dotted
  json value;
};

struct Args {
  std::string run_path, ds_path, acc_path;
  std::vector<Override> overrides;
};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

Args parse_args(const std::vector<std::string>& args) {
  Args a;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      if (!a.run_path.empty())
        ZT_THROW_INPUT("unexpected argument '", arg, "': only one run config file is taken (", a.run_path,
                       " already); name a DeepSpeed JSON with --deepspeed and an Accelerate YAML with --config_file");
      a.run_path = arg;
      continue;
    }
    std::string key = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      has_value = true;
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];
      has_value = true;
    }
    if (key.empty()) ZT_THROW_INPUT("'", arg, "': expected --key value");
    if (key == "deepspeed" || key == "deepspeed_config_file" || key == "config_file") {
      if (!has_value || value.empty()) ZT_THROW_INPUT("--", key, " needs a file path");
      (key == "config_file" ? a.acc_path : a.ds_path) = value;
      continue;
    }
    // A bare --flag is a switch (HF style: --bf16).
    a.overrides.push_back({key, has_value ? parse_override_value(value) : json(true)});
  }
  return a;
}

// A document path the run file names under `key` ("" when none), relative to the file.
std::string doc_path(const json& run_doc, const char* key, const std::string& run_source, const std::string& run_path) {
  auto it = run_doc.find(key);
  if (it == run_doc.end() || it->is_null()) return std::string();
  if (!it->is_string()) ZT_THROW_INPUT(Where{run_source, key}.str(), ": expected a file path");
  return path_in_file(it->get<std::string>(), run_path);
}

// Whether the command line wrote run key `canonical` ("model.path"): itself, an alias
// (--model_name_or_path), or its whole section (--model DIR).
bool from_command_line(const std::vector<std::string>& run_overridden, const std::string& canonical) {
  const std::string section = canonical.substr(0, canonical.find('.'));
  return std::any_of(run_overridden.begin(), run_overridden.end(),
                     [&](const std::string& o) { return o == section || canonical_run_key(o) == canonical; });
}

int64_t model_hidden_size(const ModelSection& m) {
  if (!m.preset.empty()) return model::preset_config(m.preset).hidden_size;
  if (m.path.empty() && m.config_file.empty()) return 0;
  // Only "auto" sizes need it: an unreadable model dir is reported by the model loader.
  const std::string path =
      m.config_file.empty() ? (std::filesystem::path(m.path) / "config.json").string() : m.config_file;
  try {
    const json j = json::parse(io::read_bounded_file(path, "model config"));
    return model::config_from_hf_json(j, path).hidden_size;
  } catch (const json::exception&) {
    return 0;
  } catch (const Error&) {
    return 0;
  }
}

template <class T>
void note(TrainConfig& cfg, const std::string& key, const Setting<T>& s, const std::string& source) {
  cfg.origin[key] = s.is_set() ? source : "default";
}

Setting<Precision> run_precision(const RunConfig& run, const AccelerateConfig& acc) {
  Setting<Precision> p{Precision::F32};
  if (run.bf16.is_set() || run.fp16.is_set())
    p = Setting<Precision>(Given::Set, run.bf16.value   ? Precision::BF16
                                       : run.fp16.value ? Precision::F16
                                                        : Precision::F32);
  if (acc.mixed_precision.is_set()) {
    if (p.is_set() && p.value != acc.mixed_precision.value)
      ZT_THROW_INPUT(acc.source, ": mixed_precision disagrees with bf16/fp16 in ", run.source,
                     "; set the precision in one place");
    p = acc.mixed_precision;
  }
  return p;
}

// The run-level part of the resolved config: what the rows landed in TrainConfig, the
// built-in model when none is named, the trackers' folder and the device.
void apply_run(const RunConfig& r, TrainConfig& cfg) {
  const std::string& s = r.source;
  cfg = r.train;
  const bool no_model = cfg.model.preset.empty() && cfg.model.path.empty() && cfg.model.config_file.empty();
  if (no_model) cfg.model.preset = "tiny-gpt2";  // the built-in run's model
  cfg.origin["model"] = no_model ? "default" : s;
  if (r.report_tensorboard)
    cfg.tensorboard_dir =
        r.logging_dir.empty() ? (std::filesystem::path(cfg.output_dir) / "runs").string() : r.logging_dir;
  // auto: the GPU when this build has the CUDA backend and one is visible, as PyTorch users
  // expect from `accelerate launch` (the config dump and the log name the device chosen).
  cfg.device = r.device.value != "auto" ? r.device.value : cuda::available() ? "cuda" : "cpu";
  // Every key the run config writes: its file (ds_config resolution, run after this, records
  // the origins of the values it decides).
  for (const std::string& k : r.written) cfg.origin[run_origin_key(k)] = s;
}

// One rule for paths (config_paths.h): written in the run file, relative to the file,
// from whatever directory zerotrain starts in; given on the command line, relative to
// the current directory, as a shell user expects. Every row that is a path.
void place_paths(RunConfig& run, const std::string& run_path, const std::vector<std::string>& run_overridden) {
  for (const RunKey& k : run_keys()) {
    if (k.path == RunPath::No) continue;
    const std::string base = from_command_line(run_overridden, k.key) ? std::string() : run_path;
    const auto place = [&](std::string& p) {
      // A chat template is a built-in name or a Jinja file.
      if (k.path == RunPath::ChatTemplate && !io::builtin_chat_template(p).empty()) return;
      p = path_in_file(p, base);
    };
    std::visit(
        [&](auto field) {
          using Field = decltype(field);
          if constexpr (std::is_same_v<Field, std::string ModelSection::*>) place(run.train.model.*field);
          if constexpr (std::is_same_v<Field, std::string DataSection::*>) place(run.train.data.*field);
          if constexpr (std::is_same_v<Field, std::string RunConfig::*>) place(run.*field);
          if constexpr (std::is_same_v<Field, std::vector<std::string> DataSection::*>)
            for (std::string& p : run.train.data.*field) place(p);
        },
        k.target);
  }
}

// master_weights: false keeps no f32 master and the optimizer state in bf16; it needs
// bf16 parameters (f32 ones are their own master already; fp16 needs the master under
// loss scaling).
void apply_master_weights(const RunConfig& r, TrainConfig& cfg) {
  cfg.optimizer.master_weights = r.master_weights.value ? zero::MasterWeights::F32 : zero::MasterWeights::None;
  note(cfg, "master_weights", r.master_weights, r.source);
  if (r.master_weights.value) return;
  const std::string where = Where{r.source, "master_weights"}.str();
  if (cfg.precision == Precision::F32)
    ZT_THROW_INPUT(where,
                   ": false needs bf16 parameters, but this run trains in fp32 (f32 parameters are their "
                   "own master weights): add bf16: true (--bf16 true), or remove master_weights: false");
  if (cfg.precision == Precision::F16)
    ZT_THROW_INPUT(where,
                   ": false is not supported with fp16 (fp16 training needs f32 master weights under loss "
                   "scaling): use bf16 or keep master weights (master_weights: true)");
}

// The built-in run's settings that a ds_config takes over: for each group of ds_config
// keys, the run keys they supersede. A ds key counts when it is written with a value
// ("auto" takes the run's value, so the run's default stays).
struct Supersedes {
  std::vector<std::string> ds_keys;  // dotted
  std::vector<std::string> run_keys;
};
const std::vector<Supersedes>& builtin_run_superseded() {
  static const std::vector<Supersedes> table = {
      {{"train_batch_size", "train_micro_batch_size_per_gpu"}, {"per_device_train_batch_size"}},
      {{"train_batch_size", "gradient_accumulation_steps"}, {"gradient_accumulation_steps"}},
      {{"optimizer.params.lr"}, {"learning_rate"}},
      {{"optimizer.params.weight_decay"}, {"weight_decay"}},
      {{"optimizer.params.eps"}, {"adam_epsilon"}},
      {{"optimizer.params.betas"}, {"adam_beta1", "adam_beta2"}},
      {{"scheduler"}, {"lr_scheduler_type"}},
      {{"gradient_clipping"}, {"max_grad_norm"}},
      {{"steps_per_print"}, {"steps_per_print", "logging_steps", "log_interval"}},
      {{"seed"}, {"seed"}},
      {{"fp16", "bf16", "bfloat16"}, {"fp16", "bf16"}},
  };
  return table;
}

bool written(const json& doc, const std::string& dotted) {
  const json* at = &doc;
  size_t begin = 0;
  while (true) {
    const size_t dot = dotted.find('.', begin);
    const std::string part = dotted.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!at->is_object()) return false;
    const auto it = at->find(part);
    if (it == at->end() || it->is_null()) return false;
    at = &*it;
    if (dot == std::string::npos) return !is_auto(*at);
    begin = dot + 1;
  }
}

// Removes from the run document the spellings of `key`'s setting other than `key` itself
// (save_interval for --save_steps, model.path for --model.name_or_path is its section's),
// unless the command line also gives them: two command-line spellings stay a conflict.
void drop_other_spellings(json& run_doc, const std::string& key, const std::vector<Override>& overrides) {
  if (!run_doc.is_object()) return;
  for (const RunKey& k : run_keys()) {
    std::vector<std::string> spellings = k.aliases;
    spellings.push_back(k.key);
    if (!contains(spellings, key)) continue;
    for (const std::string& other : spellings) {
      if (other == key) continue;
      const bool on_command_line = std::any_of(overrides.begin(), overrides.end(),
                                               [&](const Override& o) { return o.key == other; });
      if (on_command_line) continue;
      const size_t dot = other.find('.');
      if (dot == std::string::npos) {
        run_doc.erase(other);
      } else if (auto section = run_doc.find(other.substr(0, dot)); section != run_doc.end() && section->is_object()) {
        section->erase(other.substr(dot + 1));
      }
    }
    return;
  }
}

// The run keys that choose the model: one of them on the command line replaces the
// file's choice (HF's rule: the command line wins), so `--model_name_or_path DIR` over a
// run file (or the built-in run) with `model: tiny-gpt2` trains DIR instead of
// refusing the pair.
bool is_model_choice(const std::string& canonical) {
  return canonical == "model" || canonical == "model.preset" || canonical == "model.path" ||
         canonical == "model.config";
}

void drop_other_model_choices(json& run_doc, const std::string& key, const std::vector<Override>& overrides) {
  const std::string canonical = canonical_run_key(key);
  if (!is_model_choice(canonical) || canonical == "model" || !run_doc.is_object()) return;
  const auto on_command_line = [&](const std::string& choice) {
    return std::any_of(overrides.begin(), overrides.end(),
                       [&](const Override& o) { return canonical_run_key(o.key) == choice; });
  };
  auto model = run_doc.find("model");
  if (model != run_doc.end() && model->is_string()) {
    run_doc.erase(model);  // `model: NAME`, the shorthand of a preset or a directory
    return;
  }
  for (const RunKey& k : run_keys()) {
    if (!is_model_choice(k.key) || k.key == canonical || on_command_line(k.key)) continue;
    std::vector<std::string> spellings = k.aliases;
    spellings.push_back(k.key);
    for (const std::string& sp : spellings) {
      const size_t dot = sp.find('.');
      if (dot == std::string::npos) {
        run_doc.erase(sp);
      } else if (auto section = run_doc.find(sp.substr(0, dot)); section != run_doc.end() && section->is_object()) {
        section->erase(sp.substr(dot + 1));
      }
    }
  }
}

// RunDocument::BuiltIn: drops the built-in run's values that the DeepSpeed settings
// supersede (keeping those the command line set: a conflict there is the user's).
void yield_builtin_run(json& run_doc, const json& ds_doc, const std::vector<std::string>& run_overridden) {
  if (!ds_doc.is_object() || !run_doc.is_object()) return;
  for (const Supersedes& s : builtin_run_superseded()) {
    if (std::none_of(s.ds_keys.begin(), s.ds_keys.end(), [&](const std::string& k) { return written(ds_doc, k); }))
      continue;
    for (const std::string& k : s.run_keys) {
      const bool overridden = std::any_of(run_overridden.begin(), run_overridden.end(),
                                          [&](const std::string& o) { return o.substr(0, o.find('.')) == k; });
      if (!overridden) run_doc.erase(k);
    }
  }
}

// An Accelerate YAML's num_processes is how many processes `accelerate launch` (or
// `zerotrain launch --config_file`) starts; a running job of another size did not come from
// it. A plain process cannot become the YAML's N: an error that says how to start them. A
// launcher's job of another size is a warning: the job's own size decides the batches.
// Returns the warning ("" when they agree).
std::string check_world_against_accelerate(const AccelerateConfig& acc, const LoadOptions& options) {
  const int yaml = acc.launch.num_processes, world = options.world_size;
  if (world <= 0 || yaml <= 0 || yaml == world) return "";
  const std::string where = Where{acc.source, "num_processes"}.str();
  if (options.world_source == WorldSource::PlainProcess)
    ZT_THROW_INPUT(where, " is ", yaml,
                   ", but this is one process started on its own, and an Accelerate config "
                   "does not start processes; start ",
                   yaml, " with `zerotrain launch --config_file ", acc.source,
                   " -- zerotrain train ...`, or train on this one process with --num_processes ", world);
  return str(where, " is ", yaml, " but the job runs ", world, " processes; the batch sizes are worked out for ", world,
             " (give --num_processes ", world, " to say so)");
}

zero::OptimizerType hf_optim(const std::string& name) {
  if (name == "sgd") return zero::OptimizerType::SGD;
  if (name == "lion" || name == "lion_32bit") return zero::OptimizerType::Lion;
  if (name == "adam") return zero::OptimizerType::Adam;
  return zero::OptimizerType::AdamW;
}

}  // namespace

bool command_line_names_model_or_data(const std::vector<std::string>& argv) {
  for (const Override& o : parse_args(argv).overrides) {
    const std::string k = canonical_run_key(o.key);
    if (is_model_choice(k) || k == "data" || k == "data.train" || k == "data.validation") return true;
  }
  return false;
}

namespace {

// The documents of a command line as they are read and overridden, before parsing.
struct Documents {
  json run_doc, acc_doc, ds_doc;
  std::string run_source, acc_source, ds_source;
  std::string acc_path, ds_path;
  AccelerateConfig acc;
  std::vector<std::string> acc_only;  // the Accelerate YAML's own top-level keys
  std::vector<std::string> acc_overridden, ds_overridden, run_overridden;
  std::vector<Override> rest;  // the overrides that are not the Accelerate YAML's
  std::string world_warning;
};

// 1. The run document and the Accelerate YAML, with the overrides of Accelerate keys
// first: they decide which DeepSpeed document exists.
Documents load_run_and_accelerate(const Args& args, const LoadOptions& options) {
  Documents d;
  d.run_doc = args.run_path.empty() ? json::object() : load_document(args.run_path);
  d.run_source = args.run_path.empty() ? kCommandLine : args.run_path;
  // One Accelerate config: `zerotrain launch --config_file` passes its file on, which must not
  // quietly replace another that the run file names.
  if (const std::string named = doc_path(d.run_doc, "accelerate_config", d.run_source, args.run_path);
      !args.acc_path.empty() && !named.empty() &&
      std::filesystem::path(named).lexically_normal() != std::filesystem::path(args.acc_path).lexically_normal())
    ZT_THROW_INPUT(d.run_source, ": accelerate_config names ", named, " but --config_file names ", args.acc_path,
                   "; name one Accelerate config");
  d.acc_path =
      !args.acc_path.empty() ? args.acc_path : doc_path(d.run_doc, "accelerate_config", d.run_source, args.run_path);
  d.acc_doc = d.acc_path.empty() ? json() : load_document(d.acc_path);
  d.acc_source = d.acc_path.empty() ? kCommandLine : d.acc_path;
  for (const auto& k : accelerate_top_level_keys())
    if (k != "fp16" && k != "bf16") d.acc_only.push_back(k);
  for (const auto& o : args.overrides) {
    const std::string first = o.key.substr(0, o.key.find('.'));
    if (!contains(d.acc_only, first) || contains(run_top_level_keys(), first)) {
      d.rest.push_back(o);
      continue;
    }
    if (d.acc_doc.is_null()) d.acc_doc = json::object();
    set_dotted(d.acc_doc, o.key, o.value, "--" + o.key);
    d.acc_overridden.push_back(o.key);
  }
  if (!d.acc_overridden.empty()) d.acc_source += d.acc_path.empty() ? "" : " + command line";
  if (!d.acc_doc.is_null()) d.acc = parse_accelerate_config(d.acc_doc, d.acc_source);
  AccelerateConfig& acc = d.acc;
  // Its deepspeed_config_file follows the same rule as the run file's paths. Accelerate
  // itself opens it from the current directory: a YAML written that way for `accelerate
  // launch` gets the fix spelled out instead of a bare "no such file".
  const std::string ds_as_written = acc.deepspeed_config_file;
  acc.deepspeed_config_file =
      path_in_file(acc.deepspeed_config_file,
                   contains(d.acc_overridden, "deepspeed_config.deepspeed_config_file") ? std::string() : d.acc_path);
  std::error_code ec;
  if (acc.deepspeed_config_file != ds_as_written && !std::filesystem::exists(acc.deepspeed_config_file, ec) &&
      std::filesystem::exists(ds_as_written, ec))
    ZT_THROW_INPUT(acc.source, ": deepspeed_config_file '", ds_as_written,
                   "' is taken from the YAML's folder, as every relative path written in a file (",
                   acc.deepspeed_config_file,
                   " does not exist); Accelerate takes it from the current directory, where it exists: write $PWD/",
                   ds_as_written, " (or an absolute path) in the YAML");
  d.world_warning = check_world_against_accelerate(acc, options);
  return d;
}

// 2. The DeepSpeed document: a JSON file (command line > run config > Accelerate's
// deepspeed_config_file), or the settings the Accelerate YAML carries itself.
void load_deepspeed(Documents& d, const Args& args) {
  const AccelerateConfig& acc = d.acc;
  d.ds_path = args.ds_path;
  if (d.ds_path.empty()) {
    const std::string from_run = doc_path(d.run_doc, "deepspeed", d.run_source, args.run_path);
    if (!from_run.empty() && !acc.deepspeed_config_file.empty() &&
        std::filesystem::path(from_run).lexically_normal() !=
            std::filesystem::path(acc.deepspeed_config_file).lexically_normal())
      ZT_THROW_INPUT(d.run_source, ": deepspeed names ", from_run, " but ", acc.source, " names deepspeed_config_file ",
                     acc.deepspeed_config_file, "; name one DeepSpeed config");
    d.ds_path = !from_run.empty() ? from_run : acc.deepspeed_config_file;
  }
  if (!d.ds_path.empty()) {
    if (!acc.source.empty()) check_no_ds_duplication(acc, d.ds_path);
    d.ds_doc = load_document(d.ds_path);
    d.ds_source = d.ds_path;
  } else if (!acc.ds_doc.empty()) {
    d.ds_doc = acc.ds_doc;
    d.ds_source = acc.source + " (deepspeed settings)";
  }
}

// 3. The other overrides: run-config keys, DeepSpeed keys. A key both documents know
// (gradient_accumulation_steps, steps_per_print, seed) edits the ds_config when it
// sets that key, so the override is the value that wins.
void apply_overrides(Documents& d, const Args& args, const LoadOptions& options) {
  for (const auto& o : d.rest) {
    const std::string first = o.key.substr(0, o.key.find('.'));
    const bool in_ds = contains(ds_top_level_keys(), first);
    // A TrainingArguments field without a run key goes to the run document (its table
    // decides), unless DeepSpeed has the key too (dataloader_drop_last): the ds_config's.
    const bool in_run = contains(run_top_level_keys(), first) ||
                        (!in_ds && std::any_of(hf_training_args().begin(), hf_training_args().end(),
                                               [&](const HfTrainingArg& a) { return a.name == first; }));
    const bool nested = o.key.find('.') != std::string::npos;  // --fp16.enabled: the ds block
    json& ds = d.ds_doc;
    if (in_ds && (!in_run || nested || (ds.is_object() && ds.contains(first) && !is_auto(ds[first])))) {
      if (ds.is_null()) ds = json::object();
      // --bf16 (HF style) against a ds_config with a bf16 block: that block's "enabled".
      if (!nested && o.value.is_boolean() && ds.contains(first) && ds[first].is_object()) {
        set_dotted(ds, first + ".enabled", o.value, "--" + o.key);
        d.ds_overridden.push_back(first + ".enabled");
        continue;
      }
      // --optimizer.params.lr with no optimizer block: DeepSpeed needs a type; AdamW is
      // what the run would use anyway (--optimizer.type changes it).
      if (first == "optimizer" && !ds.contains("optimizer")) ds["optimizer"] = {{"type", "AdamW"}};
      set_dotted(ds, o.key, o.value, "--" + o.key);
      d.ds_overridden.push_back(o.key);
    } else if (in_run) {
      // HF's rule: the command line's value wins over the run file's, whichever of the
      // setting's spellings each uses (--save_steps over a file's save_interval).
      drop_other_spellings(d.run_doc, o.key, d.rest);
      drop_other_model_choices(d.run_doc, o.key, d.rest);
      set_dotted(d.run_doc, o.key, o.value, "--" + o.key);
      d.run_overridden.push_back(o.key);
    } else {
      std::vector<std::string> all = run_top_level_keys();
      all.insert(all.end(), ds_top_level_keys().begin(), ds_top_level_keys().end());
      all.insert(all.end(), d.acc_only.begin(), d.acc_only.end());
      ZT_THROW_INPUT("--", o.key, ": unknown setting '", first, "'", did_you_mean(first, all),
                     "; overrides take the keys of the run config, the ds_config or the Accelerate YAML "
                     "(see docs/configs.md)");
    }
  }
  if (options.run_document == RunDocument::BuiltIn) yield_builtin_run(d.run_doc, d.ds_doc, d.run_overridden);
  if (!d.ds_overridden.empty()) d.ds_source = d.ds_source.empty() ? kCommandLine : d.ds_source + " + command line";
  if (!d.run_overridden.empty() && !args.run_path.empty()) d.run_source += " + command line";
  if (d.ds_source.empty()) d.ds_source = "(no ds_config)";
}

// What the ds_config's "auto" values are resolved from: the run's own settings.
RunContext run_context(const RunConfig& run, const Documents& d, const LoadOptions& options) {
  RunContext ctx;
  ctx.run_source = d.run_source;
  ctx.world_size = options.world_size > 0           ? options.world_size
                   : d.acc.launch.num_processes > 0 ? d.acc.launch.num_processes
                                                    : 1;
  ctx.micro_batch = run.per_device_train_batch_size;
  ctx.grad_accum = run.gradient_accumulation_steps;
  ctx.lr = run.learning_rate;
  ctx.beta1 = run.adam_beta1;
  ctx.beta2 = run.adam_beta2;
  ctx.eps = run.adam_epsilon;
  ctx.weight_decay = run.weight_decay;
  ctx.max_grad_norm = run.max_grad_norm;
  ctx.precision = run_precision(run, d.acc);
  ctx.warmup_steps = run.train.warmup_steps;
  ctx.total_steps = run.train.max_steps;
  return ctx;
}

// The run config's settings that meet the ds_config's and the Accelerate YAML's: the run's
// own explicit loop settings win, one optimizer and one schedule, and Accelerate's switches.
void settle_run_against_documents(const RunConfig& run, const DsConfig& ds, const Documents& d, TrainConfig& cfg) {
  for (const char* key : {"steps_per_print", "seed"})
    if (run.wrote(key)) cfg.origin[key] = d.run_source;
  if (run.wrote("steps_per_print")) cfg.steps_per_print = run.train.steps_per_print;
  if (run.wrote("seed")) cfg.seed = run.train.seed;
  apply_master_weights(run, cfg);
  if (run.optim.is_set()) {
    if (ds.has_optimizer)
      ZT_THROW_INPUT(d.run_source, ": optim is set and ", d.ds_source,
                     " has an optimizer block; choose the optimizer in one place");
    cfg.optimizer.type = hf_optim(run.optim.value);
    cfg.optimizer.adam_w_mode = cfg.optimizer.type != zero::OptimizerType::Adam;
    cfg.origin["optimizer.type"] = d.run_source;
  }
  if (cfg.scheduler.empty()) {
    cfg.hf_scheduler = run.lr_scheduler_type.value;
    note(cfg, "lr_scheduler_type", run.lr_scheduler_type, d.run_source);
  } else if (run.lr_scheduler_type.is_set()) {
    ZT_THROW_INPUT(d.run_source, ": lr_scheduler_type is set and ", d.ds_source,
                   " has a scheduler block; choose the schedule in one place");
  }
  const AccelerateConfig& acc = d.acc;
  cfg.launch = acc.launch;
  if (acc.zero3_init) cfg.zero.zero3_init = true;
  if (acc.activation_checkpointing) cfg.model.activation_checkpointing = true;
  if (acc.use_cpu) {
    if (run.device.is_set() && run.device.value != "cpu" && run.device.value != "auto")
      ZT_THROW_INPUT(acc.source, ": use_cpu is true but ", d.run_source, " sets device ", run.device.value,
                     "; set one of them");
    cfg.device = "cpu";
  }
}

}  // namespace

TrainConfig load_train_config(const std::vector<std::string>& argv, const LoadOptions& options) {
  const Args args = parse_args(argv);
  Documents d = load_run_and_accelerate(args, options);
  load_deepspeed(d, args);
  apply_overrides(d, args, options);

  // Parse and resolve.
  RunConfig run = parse_run_config(d.run_doc, d.run_source);
  place_paths(run, args.run_path, d.run_overridden);
  const DsConfig ds = parse_ds_config(d.ds_doc.is_null() ? json::object() : d.ds_doc, d.ds_source);
  RunContext ctx = run_context(run, d, options);
  TrainConfig cfg;
  apply_run(run, cfg);
  apply_run_lora(run, cfg);
  ctx.hidden_size = model_hidden_size(cfg.model);
  resolve_ds_config(ds, ctx, cfg);
  settle_run_against_documents(run, ds, d, cfg);
  cfg.origin["world_size"] = options.world_size > 0           ? "the running job"
                             : d.acc.launch.num_processes > 0 ? d.acc.source + " (num_processes)"
                                                              : "default";
  cfg.warnings.insert(cfg.warnings.end(), d.acc.warnings.begin(), d.acc.warnings.end());
  if (!d.world_warning.empty()) cfg.warnings.push_back(d.world_warning);
  cfg.warnings.insert(cfg.warnings.end(), run.warnings.begin(), run.warnings.end());

  for (const auto& k : d.ds_overridden) cfg.origin[k] = kCommandLine;
  // Under the name `config check` prints: --save_steps sets save_interval, --model.path model.
  for (const auto& k : d.run_overridden) cfg.origin[run_origin_key(canonical_run_key(k))] = kCommandLine;
  for (const auto& k : d.acc_overridden) cfg.origin[k] = kCommandLine;
  std::string sources;
  for (const auto& s : {args.run_path, d.ds_path, d.acc_path})
    if (!s.empty()) sources += (sources.empty() ? "" : " + ") + s;
  if (!args.overrides.empty()) sources += (sources.empty() ? "" : " + ") + kCommandLine;
  cfg.source = sources.empty() ? "defaults" : sources;

  check_lora_run(cfg);
  if (cfg.max_steps > 0) set_total_steps(cfg, cfg.max_steps);
  return cfg;
}

void set_total_steps(TrainConfig& cfg, int64_t total_steps) {
  ZT_CHECK(total_steps > 0, "total steps ", total_steps);
  if (cfg.warmup_ratio > 0) cfg.warmup_steps = static_cast<int64_t>(std::ceil(cfg.warmup_ratio * total_steps));
  if (cfg.scheduler.empty() || !cfg.scheduler.contains("params")) return;
  const std::optional<ScheduleType> type = schedule_type_from_name(cfg.scheduler.value("type", ""));
  if (!type) return;
  for (auto& kv : cfg.scheduler["params"].items()) {
    if (!is_auto(kv.value())) continue;
    const SchedulerParamKey* k = scheduler_param(*type, kv.key());
    if (k && k->auto_rule == SchedulerAuto::TotalSteps) kv.value() = total_steps;
    if (k && k->auto_rule == SchedulerAuto::WarmupSteps) kv.value() = cfg.warmup_steps;
  }
}

}  // namespace zt::config
