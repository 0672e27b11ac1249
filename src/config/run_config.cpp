// Run config parsing: sections model/data/samples, loop keys, and HF Trainer-style keys.
#include "config/run_config.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
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

void parse_model(const json& doc, const Where& top, RunConfig& r) {
  auto it = doc.find("model");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("model");
  if (it->is_string()) {
    // model: NAME — a preset name, an HF config.json, or an HF model directory.
    const std::string name = it->get<std::string>();
    const auto presets = model::preset_names();
    const bool json_file = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
    (std::find(presets.begin(), presets.end(), name) != presets.end() ? r.model.preset
     : json_file                                                      ? r.model.config_file
                                                                      : r.model.path) = name;
    return;
  }
  check_known_keys(*it, run_section_keys("model"), w, kFix);
  if (it->contains("path") && it->contains("name_or_path"))
    ZT_THROW_INPUT(w.str(), ": 'path' and 'name_or_path' are the same setting; keep 'path'");
  r.model.preset = read_string(*it, "preset", w, "").value;
  r.model.path = read_string(*it, it->contains("name_or_path") ? "name_or_path" : "path", w, "").value;
  r.model.config_file = read_string(*it, "config", w, "").value;
  r.model.tokenizer = read_string(*it, "tokenizer", w, "").value;
  r.model.activation_checkpointing = read_bool(*it, "activation_checkpointing", w, false).value;
  const int sources = !r.model.preset.empty() + !r.model.path.empty() + !r.model.config_file.empty();
  if (sources > 1)
    ZT_THROW_INPUT(w.str(), ": give one of model.preset, model.path and model.config (a preset, a model directory "
                   "with its weights, or a config.json to initialise from), not several");
}

// The bound of each factor of a step's token count (micro batch, accumulation, seq_len):
// 2^24 each, so their product with the world size stays inside int64.
constexpr int64_t kMaxBatchFactor = int64_t{1} << 24;

void parse_data(const json& doc, const Where& top, RunConfig& r) {
  auto it = doc.find("data");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("data");
  check_known_keys(*it, run_section_keys("data"), w, kFix);
  r.data.train = read_string_list(*it, "train", w);
  r.data.validation = read_string_list(*it, "validation", w);
  r.data.jsonl_field = read_string(*it, "jsonl_field", w, "text").value;
  r.data.chat_template = read_string(*it, "chat_template", w, "").value;
  r.data.skip_bad_records = read_bool(*it, "skip_bad_records", w, false).value;
  r.data.packing = read_bool(*it, "packing", w, false).value;
  r.data.seq_len = read_int(*it, "seq_len", w, 0).value;
  r.data.validation_fraction = read_number(*it, "validation_fraction", w, 0.05).value;
  if (r.data.seq_len < 0) ZT_THROW_INPUT(w.key("seq_len").str(), ": must be positive (or 0 for the model's context)");
  if (r.data.seq_len > kMaxBatchFactor)
    ZT_THROW_INPUT(w.key("seq_len").str(), ": ", r.data.seq_len, " is too large; at most ", kMaxBatchFactor,
                   " tokens per sequence");
  if (r.data.validation_fraction < 0 || r.data.validation_fraction >= 1)
    ZT_THROW_INPUT(w.key("validation_fraction").str(), ": must be in [0, 1)");
}

constexpr int64_t kMaxSampleTokens = 1 << 20;
constexpr double kMaxSampleTemperature = 1e4;

void parse_samples(const json& doc, const Where& top, RunConfig& r) {
  auto it = doc.find("samples");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("samples");
  check_known_keys(*it, run_section_keys("samples"), w, kFix);
  r.sample_prompts = read_string_list(*it, "prompts", w);
  r.sample_tokens = read_int(*it, "tokens", w, 0);
  r.sample_temperature = read_number(*it, "temperature", w, 0.8);
  r.sample_top_k = read_int(*it, "top_k", w, 40);
  if (r.sample_tokens.value < 0 || r.sample_top_k.value < 0 || r.sample_temperature.value < 0)
    ZT_THROW_INPUT(w.str(), ": tokens, temperature and top_k must not be negative");
  // The end-of-run samples are generated after training: what they would refuse then is
  // refused here, before the first step (the generator's own checks, and bounds that keep
  // prompt + tokens and top_k inside their integer types).
  if (r.sample_tokens.value > kMaxSampleTokens)
    ZT_THROW_INPUT(w.key("tokens").str(), ": ", r.sample_tokens.value, " is more than ", kMaxSampleTokens,
                   " tokens per sample; lower it (`zerotrain generate` writes longer texts)");
  if (r.sample_top_k.value > INT32_MAX)
    ZT_THROW_INPUT(w.key("top_k").str(), ": ", r.sample_top_k.value, " is too large; at most ", INT32_MAX,
                   " (a top_k above the vocabulary size keeps every token; 0 turns it off)");
  if (!(r.sample_temperature.value <= kMaxSampleTemperature))
    ZT_THROW_INPUT(w.key("temperature").str(), ": ", r.sample_temperature.value, " is not a temperature in [0, ",
                   kMaxSampleTemperature, "] (0 is greedy)");
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
  parse_model(doc, top, r);
  parse_data(doc, top, r);
  parse_samples(doc, top, r);
  parse_lora(doc, top, r);
  r.peft = read_string(doc, "peft", top, "").value;
  r.adapter = read_string(doc, "adapter", top, "").value;
  r.max_steps = read_int(doc, "max_steps", top, 0);
  r.epochs = read_number(doc, "epochs", top, 1.0);
  r.eval_interval = read_int(doc, "eval_interval", top, 0);
  r.eval_batches = read_int(doc, "eval_batches", top, 20);
  r.eval_batch_size = read_int(doc, "per_device_eval_batch_size", top, 0);
  r.data_seed = read_int(doc, "data_seed", top, -1);
  r.save_interval = read_int(doc, "save_interval", top, 0);
  r.keep_last = read_int(doc, "keep_last", top, 2);
  // HF TrainingArguments.save_strategy: "steps" (checkpoints every save_interval steps and
  // at the end) or "no" (none; a stop signal still saves, so that the stop can be resumed).
  r.save_strategy = read_string(doc, "save_strategy", top, "steps");
  check_one_of(r.save_strategy, {"steps", "epoch", "no"}, top.key("save_strategy"));
  // HF TrainingArguments.eval_strategy (its alias evaluation_strategy: before transformers 4.41).
  r.eval_strategy = read_string(doc, "eval_strategy", top, "steps");
  check_one_of(r.eval_strategy, {"steps", "epoch", "no"}, top.key("eval_strategy"));
  r.output_dir = read_string(doc, "output_dir", top, "out");
  // HF TrainingArguments.overwrite_output_dir: a new run may replace the run already in
  // output_dir (without it such a run exits 2, touching nothing).
  r.overwrite_output_dir = read_bool(doc, "overwrite_output_dir", top, false);
  // TrainingArguments keys that change nothing here: a user's file loads, and each is named.
  const auto no_effect = [&](const char* key, const std::string& why) {
    r.warnings.push_back(top.key(key).str() + ": accepted but has no effect here (" + why + ")");
  };
  if (doc.contains("report_to")) {
    // HF's trackers: tensorboard writes event files; "all" means every one installed, here
    // tensorboard; the others are named in a warning.
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
  r.load_best_model_at_end = read_bool(doc, "load_best_model_at_end", top, false);
  r.metric_for_best_model = read_string(doc, "metric_for_best_model", top, "loss");
  // The validation loss is the one metric a run computes (HF names it loss or eval_loss).
  check_one_of(r.metric_for_best_model, {"loss", "eval_loss"}, top.key("metric_for_best_model"));
  r.greater_is_better = read_bool(doc, "greater_is_better", top, false);
  r.early_stopping_patience = read_int(doc, "early_stopping_patience", top, 0);
  r.early_stopping_threshold = read_number(doc, "early_stopping_threshold", top, 0.0);
  if (r.early_stopping_patience.value < 0 || r.early_stopping_threshold.value < 0)
    ZT_THROW_INPUT(top.key("early_stopping_patience").str(), ": early_stopping_patience and early_stopping_threshold "
                   "must not be negative (patience 0: no early stopping)");
  const bool evaluates = r.eval_strategy.value != "no";
  if (r.load_best_model_at_end.value) {
    // HF's TrainingArguments checks: the best model is a saved checkpoint, judged by the
    // evaluation at that step.
    if (!evaluates || r.save_strategy.value == "no" || r.eval_strategy.value != r.save_strategy.value)
      ZT_THROW_INPUT(top.key("load_best_model_at_end").str(), ": needs eval_strategy and save_strategy to be the same "
                     "and not \"no\" (they are \"", r.eval_strategy.value, "\" and \"", r.save_strategy.value, "\")");
    if (r.save_strategy.value == "steps" &&
        (r.eval_interval.value <= 0 || r.save_interval.value <= 0 || r.save_interval.value % r.eval_interval.value != 0))
      ZT_THROW_INPUT(top.key("load_best_model_at_end").str(), ": needs save_steps (", r.save_interval.value,
                     ") to be a round multiple of eval_steps (", r.eval_interval.value, "), both positive");
  }
  if (r.early_stopping_patience.value > 0 && !evaluates)
    ZT_THROW_INPUT(top.key("early_stopping_patience").str(), ": early stopping needs evaluations (eval_strategy is \"no\")");
  // Seconds from the first stop signal to an immediate exit when the step and the save have
  // not ended by then (0: wait for them; a third SIGINT still exits at once).
  r.stop_grace_seconds = read_int(doc, "stop_grace_seconds", top, 0);
  r.seed = read_int(doc, "seed", top, 1234);
  r.steps_per_print = read_int(doc, "steps_per_print", top, 10);
  // "auto" (the restart form): the latest checkpoint when there is one, else a fresh start.
  r.resume = read_string(doc, "resume", top, "", AutoOk::Yes);
  if (r.resume.is_auto()) r.resume = Setting<std::string>(Given::Set, "auto");
  r.device = read_string(doc, "device", top, "auto", AutoOk::Yes);
  r.learning_rate = read_number(doc, "learning_rate", top, 5e-5);
  r.weight_decay = read_number(doc, "weight_decay", top, 0.0);
  r.max_grad_norm = read_number(doc, "max_grad_norm", top, 1.0);
  r.adam_beta1 = read_number(doc, "adam_beta1", top, 0.9);
  r.adam_beta2 = read_number(doc, "adam_beta2", top, 0.999);
  r.adam_epsilon = read_number(doc, "adam_epsilon", top, 1e-8);
  r.per_device_train_batch_size = read_int(doc, "per_device_train_batch_size", top, 8);
  r.gradient_accumulation_steps = read_int(doc, "gradient_accumulation_steps", top, 1);
  r.warmup_steps = read_int(doc, "warmup_steps", top, 0);
  r.warmup_ratio = read_number(doc, "warmup_ratio", top, 0.0);
  r.lr_scheduler_type = read_string(doc, "lr_scheduler_type", top, "linear");
  r.optim = read_string(doc, "optim", top, "adamw");
  r.bf16 = read_bool(doc, "bf16", top, false);
  r.fp16 = read_bool(doc, "fp16", top, false);
  r.master_weights = read_bool(doc, "master_weights", top, true);
  r.deepspeed = read_string(doc, "deepspeed", top, "").value;
  r.accelerate_config = read_string(doc, "accelerate_config", top, "").value;

  // Values that must be positive / in range.
  const auto positive = [&](const Setting<int64_t>& s, const char* key, int64_t min) {
    if (s.value < min) ZT_THROW_INPUT(top.key(key).str(), ": must be at least ", min, ", got ", s.value);
  };
  positive(r.max_steps, "max_steps", 0);
  positive(r.eval_interval, "eval_interval", 0);
  positive(r.eval_batches, "eval_batches", 1);
  positive(r.save_interval, "save_interval", 0);
  positive(r.keep_last, "keep_last", 0);
  positive(r.stop_grace_seconds, "stop_grace_seconds", 0);
  if (r.stop_grace_seconds.value > 86400)
    ZT_THROW_INPUT(top.key("stop_grace_seconds").str(), ": ", r.stop_grace_seconds.value,
                   " is more than a day; use 0 to wait for the save however long it takes");
  positive(r.steps_per_print, "steps_per_print", 1);
  positive(r.per_device_train_batch_size, "per_device_train_batch_size", 1);
  positive(r.gradient_accumulation_steps, "gradient_accumulation_steps", 1);
  positive(r.warmup_steps, "warmup_steps", 0);
  // Sizes that are multiplied together (batch * accumulation * world * seq_len tokens per
  // step) and allocated from: bounded far above any real run so that every product fits.
  const auto at_most = [&](const Setting<int64_t>& s, const char* key, int64_t max) {
    if (s.value > max)
      ZT_THROW_INPUT(top.key(key).str(), ": ", s.value, " is too large; at most ", max,
                     " (a value this size "
                     "would overflow the batch arithmetic or the memory it sizes)");
  };
  at_most(r.per_device_train_batch_size, "per_device_train_batch_size", kMaxBatchFactor);
  at_most(r.gradient_accumulation_steps, "gradient_accumulation_steps", kMaxBatchFactor);
  at_most(r.eval_batch_size, "per_device_eval_batch_size", kMaxBatchFactor);
  at_most(r.eval_batches, "eval_batches", kMaxBatchFactor);
  if (r.seed.value < 0) ZT_THROW_INPUT(top.key("seed").str(), ": must not be negative");
  if (r.data_seed.is_set() && r.data_seed.value < 0)
    ZT_THROW_INPUT(top.key("data_seed").str(), ": must not be negative");
  if (r.eval_batch_size.value < 0)
    ZT_THROW_INPUT(top.key("per_device_eval_batch_size").str(), ": must be positive (or 0: the training micro batch)");
  if (r.max_steps.value == 0 && !(r.epochs.value > 0))
    ZT_THROW_INPUT(top.key("epochs").str(), ": must be positive when max_steps is not given");
  if (r.learning_rate.value < 0) ZT_THROW_INPUT(top.key("learning_rate").str(), ": must not be negative");
  if (r.weight_decay.value < 0) ZT_THROW_INPUT(top.key("weight_decay").str(), ": must not be negative");
  // Adam divides by 1 - beta^t: a beta of 1 or more (or below 0) is out of the optimizer's
  // range, as a ds_config's betas are (ds_config.cpp).
  for (const auto& [beta, key] :
       {std::make_pair(&r.adam_beta1, "adam_beta1"), std::make_pair(&r.adam_beta2, "adam_beta2")})
    if (!(beta->value >= 0 && beta->value < 1))
      ZT_THROW_INPUT(top.key(key).str(), ": ", beta->value, " is not in [0, 1) (Adam's moment decay)");
  if (!(r.adam_epsilon.value >= 0)) ZT_THROW_INPUT(top.key("adam_epsilon").str(), ": must not be negative");
  if (r.max_grad_norm.value < 0)
    ZT_THROW_INPUT(top.key("max_grad_norm").str(), ": must be >= 0 (0 turns clipping off)");
  if (r.warmup_ratio.value < 0 || r.warmup_ratio.value > 1)
    ZT_THROW_INPUT(top.key("warmup_ratio").str(), ": must be in [0, 1]");
  if (r.warmup_ratio.is_set() && r.warmup_steps.is_set() && r.warmup_steps.value > 0)
    ZT_THROW_INPUT(top.key("warmup_ratio").str(), ": warmup_steps is also given; keep one of them");
  if (r.bf16.value && r.fp16.value) ZT_THROW_INPUT(top.str(), ": bf16 and fp16 are both true; choose one");
  check_one_of(r.device, {"auto", "cpu", "cuda"}, top.key("device"));
  // These need arguments (a metric, min_lr, the phases) that lr_scheduler_kwargs would carry.
  const std::vector<std::string> refused_schedules = {"reduce_lr_on_plateau", "cosine_with_min_lr",
                                                      "warmup_stable_decay"};
  if (std::find(refused_schedules.begin(), refused_schedules.end(), r.lr_scheduler_type.value) !=
      refused_schedules.end())
    ZT_THROW_UNSUPPORTED(
        top.key("lr_scheduler_type").str(), ": '", r.lr_scheduler_type.value,
        "' is not supported; use constant, constant_with_warmup, linear, cosine, cosine_with_restarts, polynomial or "
        "inverse_sqrt (or a ds_config scheduler block)");
  check_one_of(r.lr_scheduler_type,
               {"constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial",
                "inverse_sqrt"},
               top.key("lr_scheduler_type"));
  check_one_of(r.optim, {"adamw", "adamw_torch", "adamw_torch_fused", "adamw_hf", "adam", "sgd", "lion", "lion_32bit"},
               top.key("optim"));
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
