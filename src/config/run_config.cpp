// Run config parsing: sections model/data/samples, loop keys, and HF Trainer-style keys.
#include "config/run_config.h"

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "core/error.h"
#include "core/strings.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "config/config_keys.h"
#include "config/hf_training_args.h"

namespace zt::config {

using nlohmann::json;

namespace {

const char* kFix = "see docs/configs.md#run-config";

// Moves a top-level alias to its canonical place (a second spelling of a key is an error).
void move_alias(json& doc, const std::string& alias, const std::string& target, const Where& top) {
  const auto dot = target.find('.');
  const std::string section = dot == std::string::npos ? "" : target.substr(0, dot);
  const std::string key = dot == std::string::npos ? target : target.substr(dot + 1);
  json* dest = &doc;
  if (!section.empty()) {
    if (doc.contains(section) && doc[section].is_string() && section == "model")
      doc[section] = json{{"preset", doc[section]}};  // model: NAME shorthand
    if (!doc.contains(section) || doc[section].is_null()) doc[section] = json::object();
    require_object(doc[section], top.key(section));
    dest = &doc[section];
  }
  if (dest->contains(key))
    ZT_THROW_INPUT(top.key(alias).str(), ": '", alias, "' and '", target, "' are the same setting; keep '", target,
                   "'");
  (*dest)[key] = doc[alias];
  doc.erase(alias);
}

// The document with every top-level alias moved (section aliases such as model.name_or_path
// are their section parser's).
json canonical(json doc, const Where& top) {
  for (const RunKey& k : run_keys())
    for (const std::string& alias : k.aliases)
      if (alias.find('.') == std::string::npos && doc.contains(alias)) move_alias(doc, alias, k.key, top);
  return doc;
}

// A number a YAML plain scalar kept as a string ("1e-1", config_value.h): as a number.
json as_number_if_numeric(const json& v) {
  if (!v.is_string()) return v;
  const json parsed = parse_override_value(v.get<std::string>());
  return parsed.is_number() ? parsed : v;
}

// target_modules as a user writes it: a list, "all-linear", a regular expression (PEFT's
// reading of any other string) or, handier on a command line, plain module names separated
// by commas ("q_proj,v_proj"), which no module path fully matches as a regex.
json target_modules_value(const json& v) {
  if (!v.is_string()) return v;
  const std::string s = v.get<std::string>();
  if (s == "all-linear" || s.empty()) return v;
  const bool plain_names = s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,") ==
                           std::string::npos;
  if (!plain_names) return v;
  json list = json::array();
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) list.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return list;
}

// lora: {r, alpha, dropout, target_modules, ...}: the section in PEFT's spelling, read by
// the adapter_config.json reader (model/lora_config.h), so both have one set of rules.
void parse_lora(const json& doc, const Where& top, RunConfig& r) {
  auto it = doc.find("lora");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("lora");
  require_object(*it, w);
  check_known_keys(*it, run_section_keys("lora"), w, kFix);
  json peft = {{"peft_type", "LORA"}};
  const auto take = [&](const std::string& key, const std::string& alias, const std::string& peft_key) {
    const bool has_key = it->contains(key) && !(*it)[key].is_null();
    const bool has_alias = !alias.empty() && it->contains(alias) && !(*it)[alias].is_null();
    if (has_key && has_alias)
      ZT_THROW_INPUT(w.str(), ": '", key, "' and '", alias, "' are the same setting; keep '", key, "'");
    if (has_key || has_alias) peft[peft_key] = (*it)[has_key ? key : alias];
  };
  take("r", "", "r");
  take("alpha", "lora_alpha", "lora_alpha");
  take("dropout", "lora_dropout", "lora_dropout");
  take("target_modules", "", "target_modules");
  take("bias", "", "bias");
  take("use_rslora", "", "use_rslora");
  take("init_lora_weights", "", "init_lora_weights");
  take("modules_to_save", "", "modules_to_save");
  take("fan_in_fan_out", "", "fan_in_fan_out");
  for (const char* k : {"r", "lora_alpha", "lora_dropout"})
    if (peft.contains(k)) peft[k] = as_number_if_numeric(peft[k]);
  if (!peft.contains("target_modules"))
    ZT_THROW_INPUT(w.key("target_modules").str(), ": missing; name the modules to adapt (e.g. [q_proj, v_proj], "
                   "or all-linear)");
  peft["target_modules"] = target_modules_value(peft["target_modules"]);
  if (!peft.contains("lora_alpha")) peft["lora_alpha"] = 8;  // PEFT's default
  r.lora = model::lora_config_from_peft_json(peft, w.str());
  r.lora_where = w.str();
}

void check_one_of(const Setting<std::string>& s, const std::vector<std::string>& allowed, const Where& w) {
  if (s.is_set() && std::find(allowed.begin(), allowed.end(), s.value) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    ZT_THROW_INPUT(w.str(), ": '", s.value, "' is not one of ", list, did_you_mean(s.value, allowed));
  }
}

}  // namespace

const std::vector<std::string>& run_top_level_keys() {
  static const std::vector<std::string> keys = run_top_level_spellings();
  return keys;
}

namespace {

// The canonical keys the document writes (for `config check`'s origins).
std::vector<std::string> written_keys(const json& doc) {
  std::vector<std::string> written;
  for (const RunKey& k : run_keys()) {
    const auto dot = k.key.find('.');
    if (dot == std::string::npos) {
      if (doc.contains(k.key) && !doc[k.key].is_null()) written.push_back(k.key);
      continue;
    }
    const std::string section = k.key.substr(0, dot);
    const auto it = doc.find(section);
    if (it == doc.end() || it->is_null()) continue;
    if (it->is_string()) {  // model: NAME names the model
      if (section == "model" && k.key == "model.preset") written.push_back(k.key);
      continue;
    }
    if (!it->is_object()) continue;
    bool given = it->contains(k.key.substr(dot + 1));
    for (const std::string& a : k.aliases)
      if (a.rfind(section + ".", 0) == 0) given = given || it->contains(a.substr(section.size() + 1));
    if (given) written.push_back(k.key);
  }
  return written;
}

}  // namespace

bool RunConfig::wrote(const std::string& canonical_key) const {
  return std::find(written.begin(), written.end(), canonical_key) != written.end();
}

namespace {

// The field a row's target names, in r.
template <class C, class T>
T& field_in(RunConfig& r, T C::*field) {
  if constexpr (std::is_same_v<C, RunConfig>) {
    return r.*field;
  } else if constexpr (std::is_same_v<C, TrainConfig>) {
    return r.train.*field;
  } else if constexpr (std::is_same_v<C, ModelSection>) {
    return r.train.model.*field;
  } else {
    static_assert(std::is_same_v<C, DataSection>);
    return r.train.data.*field;
  }
}

template <class T, class... U>
constexpr bool is_one_of = (std::is_same_v<T, U> || ...);

// Reads row k's value (or its default) from `obj` under `name` into its field; `w` names
// the mapping (the document, or the key's section).
template <class C, class T>
void land(const RunKey& k, T C::*field, const json& obj, const std::string& name, const Where& w, RunConfig& r) {
  T& out = field_in(r, field);
  const auto check = [&](const RunValue& v) {
    if (k.check) k.check(v, w, name);
  };
  if constexpr (is_one_of<T, bool, OutputDirOverwrite, Setting<bool>>) {
    const Setting<bool> s = read_bool(obj, name, w, k.default_value.get<bool>());
    if constexpr (std::is_same_v<T, OutputDirOverwrite>)
      out = s.value ? OutputDirOverwrite::Yes : OutputDirOverwrite::No;
    if constexpr (std::is_same_v<T, bool>) out = s.value;
    if constexpr (std::is_same_v<T, Setting<bool>>) out = s;
  } else if constexpr (is_one_of<T, int, int64_t, uint64_t, std::optional<uint64_t>, Setting<int64_t>>) {
    const Setting<int64_t> s = read_int(obj, name, w, k.default_value.get<int64_t>());
    check({s.is_set(), s.value, static_cast<double>(s.value), ""});
    if constexpr (std::is_same_v<T, Setting<int64_t>>) out = s;
    if constexpr (std::is_same_v<T, std::optional<uint64_t>>) {
      if (s.is_set()) out = static_cast<uint64_t>(s.value);
    }
    if constexpr (is_one_of<T, int, int64_t, uint64_t>) out = static_cast<T>(s.value);
  } else if constexpr (is_one_of<T, float, double, Setting<double>>) {
    const Setting<double> s = read_number(obj, name, w, k.default_value.get<double>());
    check({s.is_set(), 0, s.value, ""});
    if constexpr (std::is_same_v<T, Setting<double>>) out = s;
    if constexpr (is_one_of<T, float, double>) out = static_cast<T>(s.value);
  } else if constexpr (is_one_of<T, std::string, Setting<std::string>, CheckpointSaves, Evaluations>) {
    Setting<std::string> s = read_string(obj, name, w, k.default_value.get<std::string>(), k.auto_ok);
    if (s.is_auto()) s = Setting<std::string>(Given::Set, "auto");
    check({s.is_set(), 0, 0, s.value});
    if (!k.choices.empty()) check_one_of(s, k.choices, w.key(name));
    if constexpr (std::is_same_v<T, std::string>) out = s.value;
    if constexpr (std::is_same_v<T, Setting<std::string>>) out = s;
    // An enum field takes the choices in its order.
    if constexpr (is_one_of<T, CheckpointSaves, Evaluations>)
      out = static_cast<T>(std::find(k.choices.begin(), k.choices.end(), s.value) - k.choices.begin());
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>);
    out = read_string_list(obj, name, w);
  }
}

void read_row(const RunKey& k, const json& obj, const std::string& name, const Where& w, RunConfig& r) {
  std::visit(
      [&](auto field) {
        if constexpr (!std::is_same_v<decltype(field), std::monostate>) land(k, field, obj, name, w, r);
      },
      k.target);
}

// A section's rows (model, data, samples), each read under the spelling the section uses
// (a section alias such as model.name_or_path; both spellings at once are an error).
void read_section(const json& doc, const std::string& section, const Where& top, RunConfig& r) {
  auto it = doc.find(section);
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key(section);
  check_known_keys(*it, run_section_keys(section), w, kFix);
  const std::string pre = section + ".";
  for (const RunKey& k : run_keys()) {
    if (k.key.rfind(pre, 0) != 0) continue;
    std::string name = k.key.substr(pre.size());
    for (const std::string& a : k.aliases) {
      if (a.rfind(pre, 0) != 0 || !it->contains(a.substr(pre.size()))) continue;
      if (it->contains(name))
        ZT_THROW_INPUT(w.str(), ": '", name, "' and '", a.substr(pre.size()), "' are the same setting; keep '", name,
                       "'");
      name = a.substr(pre.size());
    }
    read_row(k, *it, name, w, r);
  }
}

// model: NAME (a preset name, an HF config.json, or an HF model directory), or the
// section; one model source at a time.
void read_model(const json& doc, const Where& top, RunConfig& r) {
  auto it = doc.find("model");
  if (it == doc.end() || it->is_null()) return;
  ModelSection& m = r.train.model;
  if (it->is_string()) {
    const std::string name = it->get<std::string>();
    const auto presets = model::preset_names();
    (std::find(presets.begin(), presets.end(), name) != presets.end() ? m.preset
     : name.size() > 5 && ends_with(name, ".json")                    ? m.config_file
                                                                      : m.path) = name;
    return;
  }
  read_section(doc, "model", top, r);
  if (!m.preset.empty() + !m.path.empty() + !m.config_file.empty() > 1)
    ZT_THROW_INPUT(top.key("model").str(),
                   ": give one of model.preset, model.path and model.config (a preset, a model directory "
                   "with its weights, or a config.json to initialise from), not several");
}

// HF's trackers and the TrainingArguments keys that change nothing here: a user's file
// loads, and each is named.
void read_trackers_and_inert_keys(const json& doc, const Where& top, RunConfig& r) {
  const auto no_effect = [&](const char* key, const std::string& why) {
    r.warnings.push_back(top.key(key).str() + ": accepted but has no effect here (" + why + ")");
  };
  if (doc.contains("report_to")) {
    // tensorboard writes event files; "all" means every one installed, here tensorboard;
    // the others are named in a warning.
    std::string others;
    for (const std::string& t : read_string_list(doc, "report_to", top)) {
      if (t == "tensorboard" || t == "all")
        r.report_tensorboard = true;
      else if (t != "none" && !t.empty())
        others += (others.empty() ? "" : ", ") + t;
    }
    if (!others.empty())
      no_effect("report_to", others + ": no integration for it; every step's numbers are in metrics.jsonl" +
                                 std::string(r.report_tensorboard ? " (tensorboard is written)" : ""));
  }
  r.logging_dir = read_string(doc, "logging_dir", top, "").value;
  if (!r.logging_dir.empty() && !r.report_tensorboard)
    no_effect("logging_dir", "it is where report_to: tensorboard writes, and report_to does not name it");
  if (doc.contains("tf32")) {
    read_bool(doc, "tf32", top, false);
    no_effect("tf32", "f32 GEMMs run in full f32 precision; bf16 or fp16 is the fast path");
  }
  if (doc.contains("dataloader_num_workers")) {
    if (read_int(doc, "dataloader_num_workers", top, 0).value < 0)
      ZT_THROW_INPUT(top.key("dataloader_num_workers").str(), ": must not be negative");
    no_effect("dataloader_num_workers", "batches are read from memory-mapped token shards, with no loader workers");
  }
}

const char* strategy_name(int strategy) { return strategy == 0 ? "steps" : strategy == 1 ? "epoch" : "no"; }

// The rules between keys.
void check_run_rules(const RunConfig& r, const Where& top) {
  const TrainConfig& t = r.train;
  const bool evaluates = t.evaluations != Evaluations::None;
  if (t.load_best_model_at_end) {
    // HF's TrainingArguments checks: the best model is a saved checkpoint, judged by the
    // evaluation at that step.
    const int eval = static_cast<int>(t.evaluations), save = static_cast<int>(t.checkpoint_saves);
    if (!evaluates || t.checkpoint_saves == CheckpointSaves::None || eval != save)
      ZT_THROW_INPUT(top.key("load_best_model_at_end").str(),
                     ": needs eval_strategy and save_strategy to be the same "
                     "and not \"no\" (they are \"",
                     strategy_name(eval), "\" and \"", strategy_name(save), "\")");
    if (t.checkpoint_saves == CheckpointSaves::Steps &&
        (t.eval_interval <= 0 || t.save_interval <= 0 || t.save_interval % t.eval_interval != 0))
      ZT_THROW_INPUT(top.key("load_best_model_at_end").str(), ": needs save_steps (", t.save_interval,
                     ") to be a round multiple of eval_steps (", t.eval_interval, "), both positive");
  }
  if (t.early_stopping_patience > 0 && !evaluates)
    ZT_THROW_INPUT(top.key("early_stopping_patience").str(), ": early stopping needs evaluations (eval_strategy is \"no\")");
  if (t.max_steps == 0 && !(t.epochs > 0))
    ZT_THROW_INPUT(top.key("epochs").str(), ": must be positive when max_steps is not given");
  if (r.wrote("warmup_ratio") && r.wrote("warmup_steps") && t.warmup_steps > 0)
    ZT_THROW_INPUT(top.key("warmup_ratio").str(), ": warmup_steps is also given; keep one of them");
  if (r.bf16.value && r.fp16.value) ZT_THROW_INPUT(top.str(), ": bf16 and fp16 are both true; choose one");
}

}  // namespace

RunConfig parse_run_config(const json& raw, const std::string& source) {
  RunConfig r;
  r.source = source;
  const Where top{source, ""};
  // TrainingArguments fields without a run key: a warning or exit 2 each, then gone.
  json given = raw;
  take_hf_training_args(given, top, r.warnings);
  check_known_keys(given, run_top_level_keys(), top, kFix);
  const json doc = canonical(given, top);
  r.written = written_keys(doc);
  // Every row lands its value or its default; the sections first.
  for (const RunKey& k : run_keys())
    if (k.key.find('.') != std::string::npos) read_row(k, json::object(), k.key.substr(k.key.find('.') + 1), top, r);
  read_model(doc, top, r);
  read_section(doc, "data", top, r);
  read_section(doc, "samples", top, r);
  parse_lora(doc, top, r);
  for (const RunKey& k : run_keys())
    if (k.key.find('.') == std::string::npos) read_row(k, doc, k.key, top, r);
  read_trackers_and_inert_keys(doc, top, r);
  check_run_rules(r, top);
  return r;
}

void set_dotted(json& doc, const std::string& dotted, const json& value, const std::string& what) {
  json* node = &doc;
  size_t start = 0;
  std::string walked;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) ZT_THROW_INPUT(what, ": '", dotted, "' has an empty key part");
    if (dot == std::string::npos) {
      (*node)[part] = value;
      return;
    }
    walked += (walked.empty() ? "" : ".") + part;
    if (!node->contains(part) || (*node)[part].is_null()) (*node)[part] = json::object();
    if (!(*node)[part].is_object())
      ZT_THROW_INPUT(what, ": cannot set '", dotted, "': '", walked, "' is ", (*node)[part].dump(), ", not a mapping");
    node = &(*node)[part];
    start = dot + 1;
  }
}

}  // namespace zt::config
