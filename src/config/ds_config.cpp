// ds_config.json parsing: every key DeepSpeed 0.19 reads, validated against its section.
// Sections DeepSpeed validates strictly (zero_optimization, fp16, bf16, offload dicts)
// reject unknown keys as DeepSpeed does; so does the top level, where DeepSpeed silently
// ignores typos ("zero_optimisation" would quietly train without ZeRO).
#include "config/ds_config.h"

#include <algorithm>

#include "core/error.h"
#include "config/ds_config_internal.h"

namespace zt::config {

using nlohmann::json;

namespace {

const char* kFix = "see docs/configs.md for the keys zerotrain reads";

std::string type_key_name(const json& block, const Where& w) { return read_string(block, "type", w, "").value; }

// A refused feature: Unsupported error naming the key and what to do instead.
[[noreturn]] void refuse(const Where& w, const std::string& what, const std::string& fix) {
  ZT_THROW_UNSUPPORTED(w.str(), ": ", what, " is not supported by zerotrain; ", fix);
}

bool block_enabled(const json& doc, const std::string& key, const Where& w) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  require_object(*it, w.key(key));
  return read_bool(*it, "enabled", w.key(key), false).value;
}

// "fp16" and "bf16" ("bfloat16"): every key a row of config_keys_precision.cpp's tables;
// here only what a row cannot say.
void parse_precision(const json& doc, const Where& top, DsConfig& ds) {
  if (auto it = doc.find("fp16"); it != doc.end() && !it->is_null()) {
    const Where w = top.key("fp16");
    check_known_keys(*it, key_spellings(fp16_keys()), w, kFix + std::string("#fp16"));
    for (const Fp16Key& k : fp16_keys()) detail::read_key(k, *it, w, ds.fp16, ds.fp16_given);
    const Fp16Section& f = ds.fp16;
    if (f.loss_scale < 0) ZT_THROW_INPUT(w.key("loss_scale").str(), ": must be 0 (dynamic) or a positive static scale");
    if (f.initial_scale_power < 0 || f.initial_scale_power > 64)
      ZT_THROW_INPUT(w.key("initial_scale_power").str(), ": must be in 0..64 (the scale starts at 2^power)");
  }
  const bool has_bf16 = doc.contains("bf16") && !doc["bf16"].is_null();
  const bool has_bfloat16 = doc.contains("bfloat16") && !doc["bfloat16"].is_null();
  if (has_bf16 && has_bfloat16) ZT_THROW_INPUT(top.str(), ": both 'bf16' and its alias 'bfloat16' are given; keep one");
  if (has_bf16 || has_bfloat16) {
    const std::string key = has_bf16 ? "bf16" : "bfloat16";
    const Where w = top.key(key);
    const json& b = doc[key];
    check_known_keys(b, key_spellings(bf16_keys()), w, kFix + std::string("#bf16"));
    for (const Bf16Key& k : bf16_keys()) detail::read_key(k, b, w, ds.bf16, ds.bf16_given);
  }
  const Setting<bool> fp16 = ds.fp16_enabled(), bf16 = ds.bf16_enabled();
  if (fp16.is_set() && fp16.value && bf16.is_set() && bf16.value)
    ZT_THROW_INPUT(top.str(), ": fp16.enabled and bf16.enabled are both true; enable one of them");
}

void parse_optimizer(const json& doc, const Where& top, DsConfig& ds) {
  auto it = doc.find("optimizer");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("optimizer");
  check_known_keys(*it, {"type", "params", "legacy_fusion"}, w, kFix + std::string("#optimizer"));
  const std::string name = type_key_name(*it, w);
  if (name.empty()) ZT_THROW_INPUT(w.key("type").str(), ": missing; write one of Adam, AdamW, SGD, Lion");
  ds.has_optimizer = true;
  ds.optimizer_type_name = name;
  const std::string t = lower(name);
  if (t == "adam" || t == "adamw") {
    ds.optimizer_type = t == "adam" ? zero::OptimizerType::Adam : zero::OptimizerType::AdamW;
  } else if (t == "sgd") {
    ds.optimizer_type = zero::OptimizerType::SGD;
  } else if (t == "lion") {
    ds.optimizer_type = zero::OptimizerType::Lion;
    ds.beta2 = Setting<double>(0.99);
  } else {
    static const std::vector<std::string> kRefused = {"lamb",   "onebitadam", "zerooneadam", "onebitlamb", "adagrad",
                                                      "muadam", "muadamw",    "musgd",       "muon"};
    if (std::find(kRefused.begin(), kRefused.end(), t) != kRefused.end())
      refuse(w.key("type"), "optimizer '" + name + "'",
             "use Adam, AdamW, SGD or Lion (AdamW is what most recipes mean)");
    ZT_THROW_INPUT(w.key("type").str(), ": unknown optimizer '", name, "'",
                   did_you_mean(name, {"Adam", "AdamW", "SGD", "Lion", "Lamb", "OneBitAdam", "ZeroOneAdam",
                                       "OneBitLamb", "Adagrad"}),
                   "; supported: Adam, AdamW, SGD, Lion");
  }
  auto pit = it->find("params");
  if (pit == it->end() || pit->is_null()) return;
  const Where pw = w.key("params");
  check_known_keys(*pit, optimizer_param_spellings(ds.optimizer_type), pw,
                   "valid params for " + name + ": see docs/configs.md#optimizer");
  const json& p = *pit;
  for (const OptimizerParamKey& k : optimizer_param_keys())
    if (k.takes(ds.optimizer_type)) detail::read_key(k.row, p, pw, ds.params, ds.params_given);
  if (auto b = p.find("betas"); b != p.end() && !b->is_null()) {
    const Where bw = pw.key("betas");
    if (is_auto(*b)) {
      ds.beta1.given = ds.beta2.given = Given::Auto;
    } else {
      if (!b->is_array() || b->size() != 2)
        ZT_THROW_INPUT(bw.str(), ": expected two numbers [beta1, beta2] or \"auto\"");
      ds.beta1 = Setting<double>(is_auto((*b)[0]) ? Given::Auto : Given::Set,
                                 is_auto((*b)[0]) ? ds.beta1.value : to_number((*b)[0], bw.index(0)));
      ds.beta2 = Setting<double>(is_auto((*b)[1]) ? Given::Auto : Given::Set,
                                 is_auto((*b)[1]) ? ds.beta2.value : to_number((*b)[1], bw.index(1)));
      for (double v : {ds.beta1.value, ds.beta2.value})
        if (v < 0 || v >= 1) ZT_THROW_INPUT(bw.str(), ": betas must be in [0, 1)");
    }
  }
  // AdamW is decoupled weight decay whatever adam_w_mode says (DeepSpeed's FusedAdam too).
  if (ds.optimizer_type == zero::OptimizerType::AdamW) ds.params.adam_w_mode = true;
  if (ds.params.nesterov && ds.params.momentum <= 0)
    ZT_THROW_INPUT(pw.key("nesterov").str(), ": Nesterov momentum needs momentum > 0; set params.momentum");
}

void parse_aio(const json& doc, const Where& top, DsConfig& ds) {
  auto it = doc.find("aio");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("aio");
  check_known_keys(*it, key_spellings(aio_keys()), w, kFix + std::string("#aio"));
  json a = *it;
  detail::move_aliases(aio_keys(), a, [&](const std::string& alias, const std::string& key) {
    ZT_THROW_INPUT(w.str(), ": both ", key, " and its old name ", alias, " are given; keep ", key);
  });
  for (const AioKey& k : aio_keys()) detail::read_key(k, a, w, ds.aio, ds.aio_given);
}

void parse_activation_checkpointing(const json& doc, const Where& top, DsConfig& ds) {
  auto it = doc.find("activation_checkpointing");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("activation_checkpointing");
  check_known_keys(*it, key_spellings(checkpointing_keys()), w, kFix + std::string("#activation_checkpointing"));
  ds.has_activation_checkpointing = true;
  for (const CheckpointingKey& k : checkpointing_keys())
    detail::read_key(k, *it, w, ds.activation_checkpointing, ds.checkpointing_given);
}

// The top level's blocks and strings; its scalars were read from their rows.
void parse_misc(const json& doc, const Where& top, DsConfig& ds) {
  if (ds.top.dump_state)
    ds.warnings.push_back(top.key("dump_state").str() +
                          ": accepted but has no effect (`zerotrain config check` prints "
                          "the resolved config)");
  const std::vector<std::string> dtypes = {"fp16", "bf16", "fp32"};
  auto check_dtype = [&](const std::string& v, const Where& w) {
    if (!v.empty() && std::find(dtypes.begin(), dtypes.end(), v) == dtypes.end())
      ZT_THROW_INPUT(w.str(), ": '", v, "' is not one of fp16, bf16, fp32", did_you_mean(v, dtypes));
  };
  ds.communication_data_type = read_string(doc, "communication_data_type", top, "").value;
  check_dtype(ds.communication_data_type, top.key("communication_data_type"));
  if (auto it = doc.find("data_types"); it != doc.end() && !it->is_null()) {
    const Where w = top.key("data_types");
    check_known_keys(*it, {"grad_accum_dtype"}, w, kFix);
    ds.grad_accum_dtype = read_string(*it, "grad_accum_dtype", w, "").value;
    check_dtype(ds.grad_accum_dtype, w.key("grad_accum_dtype"));
  }
  if (auto it = doc.find("checkpoint"); it != doc.end() && !it->is_null()) {
    const Where w = top.key("checkpoint");
    check_known_keys(*it, {"tag_validation", "load_universal", "use_node_local_storage", "parallel_write"}, w, kFix);
    const std::string tv = read_string(*it, "tag_validation", w, "Warn").value;
    if (lower(tv) != "ignore" && lower(tv) != "warn" && lower(tv) != "fail")
      ZT_THROW_INPUT(w.key("tag_validation").str(), ": '", tv, "' is not one of Ignore, Warn, Fail");
    read_bool(*it, "load_universal", w, false);
    if (read_bool(*it, "use_node_local_storage", w, false).value)
      ds.warnings.push_back(w.key("use_node_local_storage").str() +
                            ": accepted but has no effect (every rank writes "
                            "its shard under output_dir; use a local output_dir for node-local storage)");
  }
  // Features that cannot be honoured: refused only when switched on, so configs that
  // spell out their defaults still load.
  const std::vector<std::pair<std::string, std::string>> refused_blocks = {
      {"amp", "use fp16 or bf16 instead of NVIDIA Apex AMP"},
      {"elasticity", "use a fixed train_batch_size; checkpoints already load at any world size"},
      {"autotuning", "set batch sizes and ZeRO settings yourself"},
      {"compression_training", "remove the block"},
      {"data_efficiency", "remove the block"},
      {"curriculum_learning", "remove the block"}};
  for (const auto& [key, fix] : refused_blocks)
    if (block_enabled(doc, key, top)) refuse(top.key(key), key, fix);
  if (auto it = doc.find("tensor_parallel"); it != doc.end() && it->is_object()) {
    if (read_int(*it, "autotp_size", top.key("tensor_parallel"), 1).value > 1 ||
        read_int(*it, "tp_size", top.key("tensor_parallel"), 1).value > 1)
      refuse(top.key("tensor_parallel"), "DeepSpeed AutoTP in ds_config", "remove the block");
  }
  if (auto it = doc.find("pipeline"); it != doc.end() && !it->is_null() && !(it->is_object() && it->empty()))
    refuse(top.key("pipeline"), "a ds_config pipeline block", "remove it (pipeline stages are not configured here)");
  // DeepSpeed's TensorBoardMonitor: event files in output_path/job_name (its defaults ""
  // and "DeepSpeedJobName", so ./DeepSpeedJobName), under DeepSpeed's tag names.
  if (block_enabled(doc, "tensorboard", top)) {
    const json& tb = doc["tensorboard"];
    const Where w = top.key("tensorboard");
    if (tb.is_object()) check_known_keys(tb, {"enabled", "output_path", "job_name"}, w, "remove it");
    const std::string output_path = tb.is_object() ? read_string(tb, "output_path", w, "").value : "";
    const std::string job_name = tb.is_object() ? read_string(tb, "job_name", w, "DeepSpeedJobName").value : "DeepSpeedJobName";
    ds.tensorboard_dir = (std::filesystem::path(output_path) / job_name).string();
  }
  // DeepSpeed's csvMonitor: one CSV per tag in output_path/job_name (same defaults).
  if (block_enabled(doc, "csv_monitor", top)) {
    const json& cm = doc["csv_monitor"];
    const Where w = top.key("csv_monitor");
    if (cm.is_object()) check_known_keys(cm, {"enabled", "output_path", "job_name"}, w, "remove it");
    const std::string output_path = cm.is_object() ? read_string(cm, "output_path", w, "").value : "";
    const std::string job_name = cm.is_object() ? read_string(cm, "job_name", w, "DeepSpeedJobName").value : "DeepSpeedJobName";
    ds.csv_monitor_dir = (std::filesystem::path(output_path) / job_name).string();
  }
  // The other monitors and the profiler have no effect: zerotrain logs to stdout
  // (steps_per_print) and metrics.jsonl.
  for (const char* key : {"wandb", "comet", "flops_profiler"})
    if (block_enabled(doc, key, top))
      ds.warnings.push_back(top.key(key).str() + ": accepted but has no effect (training logs go to stdout)");
}

}  // namespace

const std::vector<std::string>& ds_top_level_keys() {
  static const std::vector<std::string> spellings = key_spellings(top_level_keys());
  return spellings;
}

DsConfig parse_ds_config(const json& doc, const std::string& source) {
  DsConfig ds;
  ds.source = source;
  const Where top{source, ""};
  check_known_keys(doc, ds_top_level_keys(), top,
                   "remove it or fix the spelling (DeepSpeed would silently ignore it); " + std::string(kFix));
  for (const TopKey& k : top_level_keys()) detail::read_key(k, doc, top, ds.top, ds.top_given);
  parse_precision(doc, top, ds);
  parse_optimizer(doc, top, ds);
  if (auto it = doc.find("scheduler"); it != doc.end() && !it->is_null())
    ds.scheduler = validate_scheduler(*it, top.key("scheduler"));
  detail::parse_zero_section(doc, top, ds);
  parse_aio(doc, top, ds);
  parse_activation_checkpointing(doc, top, ds);
  parse_misc(doc, top, ds);
  return ds;
}

DsConfig load_ds_config(const std::string& path) { return parse_ds_config(load_document(path), path); }

}  // namespace zt::config
