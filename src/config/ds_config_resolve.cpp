// ds_config resolution against the run: "auto" values, the batch-size rule, and HF
// Trainer's mismatch rule (a value written in both places must agree, so a run never
// trains with a setting other than the one the user wrote).
#include <cmath>
#include <optional>

#include "core/checked_math.h"
#include "core/error.h"
#include "config/config_dump.h"
#include "config/config_keys.h"
#include "config/ds_config.h"
#include "config/scheduler_keys.h"

namespace zt::config {

using nlohmann::json;

namespace {

// A ds value written explicitly must match an explicit run value.
void check_match(const std::string& ds_source, const std::string& ds_key, double ds_value, const RunContext& run,
                 const Setting<double>& run_value, const std::string& run_key) {
  if (!run_value.is_set()) return;
  if (std::fabs(ds_value - run_value.value) <= 1e-12 * std::max(1.0, std::fabs(ds_value))) return;
  ZT_THROW_INPUT(ds_source, ": ", ds_key, " is ", ds_value, " but ", run.run_source, " sets ", run_key, " to ",
                 run_value.value, "; set one of them (or write \"auto\" in the ds_config to take the run's value)");
}

void check_match_int(const std::string& ds_source, const std::string& ds_key, int64_t ds_value, const RunContext& run,
                     const Setting<int64_t>& run_value, const std::string& run_key) {
  if (run_value.is_set() && run_value.value != ds_value)
    ZT_THROW_INPUT(ds_source, ": ", ds_key, " is ", ds_value, " but ", run.run_source, " sets ", run_key, " to ",
                   run_value.value, "; set one of them (or write \"auto\" in the ds_config to take the run's value)");
}

int64_t hidden_size(const RunContext& run, const std::string& source, const std::string& key) {
  if (run.hidden_size <= 0)
    ZT_THROW_INPUT(source, ": ", key,
                   " is \"auto\", which needs the model's hidden size, and no model is known; "
                   "set model.preset, model.path or model.config in the run config, or write a number");
  return run.hidden_size;
}

void resolve_batch(const DsConfig& ds, const RunContext& run, TrainConfig& out) {
  Setting<int64_t> b = ds.train_batch_size(), m = ds.micro_batch(), g = ds.grad_accum();
  const bool none = b.is_absent() && m.is_absent() && g.is_absent();
  if (none) b.given = m.given = g.given = Given::Auto;  // Accelerate fills them from the run
  std::string from_m = "per_device_train_batch_size", from_g = "gradient_accumulation_steps";
  if (m.is_set()) check_match_int(ds.source, "train_micro_batch_size_per_gpu", m.value, run, run.micro_batch, from_m);
  if (g.is_set()) check_match_int(ds.source, "gradient_accumulation_steps", g.value, run, run.grad_accum, from_g);
  const int64_t mv = m.is_set() ? m.value : m.is_auto() ? run.micro_batch.value : 0;
  const int64_t gv = g.is_set() ? g.value : g.is_auto() ? run.grad_accum.value : 0;
  // An "auto" train_batch_size follows from the other two.
  const int64_t bv = b.is_set() ? b.value : 0;
  const BatchSizes r = derive_batch_sizes(bv, mv, gv, run.world_size, ds.source);
  // Derived values must still agree with what the run asks for explicitly.
  if (!m.is_set())
    check_match_int(ds.source, "train_micro_batch_size_per_gpu (derived)", r.micro_batch, run, run.micro_batch, from_m);
  if (!g.is_set())
    check_match_int(ds.source, "gradient_accumulation_steps (derived)", r.grad_accum, run, run.grad_accum, from_g);
  out.train_batch_size = r.train_batch_size;
  out.micro_batch_per_gpu = r.micro_batch;
  out.grad_accum_steps = r.grad_accum;
  out.world_size = run.world_size;
  const auto orig = [&](const Setting<int64_t>& s, const std::string& from) {
    if (s.is_set()) return ds.source;
    if (s.is_auto()) return "auto (" + from + ")";
    return std::string("derived (train_batch_size = micro * gas * world)");
  };
  out.origin["train_batch_size"] = orig(b, "micro * gas * world");
  out.origin["train_micro_batch_size_per_gpu"] = orig(m, from_m);
  out.origin["gradient_accumulation_steps"] = orig(g, from_g);
}

void resolve_precision(const DsConfig& ds, const RunContext& run, TrainConfig& out) {
  const auto resolve = [&](const Setting<bool>& s, Precision p, const char* key) {
    if (s.is_auto() || s.is_absent()) return Setting<bool>(s.given, run.precision.value == p);
    // Written explicitly: an explicit run precision must agree.
    if (run.precision.is_set() && (run.precision.value == p) != s.value)
      ZT_THROW_INPUT(ds.source, ": ", key, " is ", s.value ? "true" : "false", " but ", run.run_source, " asks for ",
                     precision_name(run.precision.value),
                     " precision; set it in one place (or write \"auto\" in the ds_config)");
    return s;
  };
  const Setting<bool> fp16_written = ds.fp16_enabled(), bf16_written = ds.bf16_enabled();
  const auto fp16 = resolve(fp16_written, Precision::F16, "fp16.enabled");
  const auto bf16 = resolve(bf16_written, Precision::BF16, "bf16.enabled");
  if (fp16.value && bf16.value)
    ZT_THROW_INPUT(ds.source, ": fp16.enabled and bf16.enabled are both true; enable one of them");
  // With neither block written, the run's own precision (bf16: true / mixed_precision) holds.
  out.precision = fp16.value ? Precision::F16 : bf16.value ? Precision::BF16 : Precision::F32;
  const Setting<bool>& decided = fp16.value ? fp16_written : bf16_written;
  out.origin["precision"] = decided.is_set() ? ds.source
                            : run.precision.is_set()
                                ? (decided.is_auto() ? "auto (" : "") + run.run_source + (decided.is_auto() ? ")" : "")
                                : "default";
  // The sections as written; "enabled" is the run's decision (the loss scaler acts on it).
  out.fp16 = ds.fp16;
  out.fp16.enabled = out.precision == Precision::F16;
  out.bf16 = ds.bf16;
  out.bf16.enabled = out.precision == Precision::BF16;
}

void resolve_optimizer(const DsConfig& ds, const RunContext& run, TrainConfig& out) {
  auto& o = out.optimizer;
  const std::string pre = "optimizer.params.";
  // Explicit ds value (checked against an explicit run value), "auto" -> run value,
  // absent -> the run's value when it sets one, else the optimizer's own default.
  const auto pick = [&](const Setting<double>& s, const Setting<double>& r, const std::string& key,
                        const std::string& run_key) {
    out.origin[pre + key] = !ds.has_optimizer ? (r.is_set() ? run.run_source : "default")
                            : s.is_set()      ? ds.source
                            : s.is_auto()     ? "auto (" + run_key + ")"
                            : r.is_set()      ? run.run_source
                                              : "default";
    if (!ds.has_optimizer) return r.value;
    if (s.is_set()) {
      check_match(ds.source, pre + key, s.value, run, r, run_key);
      return s.value;
    }
    if (s.is_auto() || r.is_set()) return r.value;
    return s.value;
  };
  o = zero::OptimizerSpec{};
  o.type = ds.has_optimizer ? ds.optimizer_type : zero::OptimizerType::AdamW;
  out.origin["optimizer.type"] = ds.has_optimizer ? ds.source : "default";
  o.lr = static_cast<float>(pick(ds.lr(), run.lr, "lr", "learning_rate"));
  o.weight_decay = static_cast<float>(pick(ds.weight_decay(), run.weight_decay, "weight_decay", "weight_decay"));
  o.eps = static_cast<float>(pick(ds.eps(), run.eps, "eps", "adam_epsilon"));
  Setting<double> run_b2 = run.beta2;
  if (o.type == zero::OptimizerType::Lion && !run_b2.is_set()) run_b2.value = 0.99;
  o.beta1 = static_cast<float>(pick(ds.beta1, run.beta1, "betas[0]", "adam_beta1"));
  o.beta2 = static_cast<float>(pick(ds.beta2, run_b2, "betas[1]", "adam_beta2"));
  o.adam_w_mode = ds.has_optimizer ? ds.params.adam_w_mode : true;
  o.bias_correction = ds.params.bias_correction;
  o.momentum = static_cast<float>(ds.params.momentum);
  o.nesterov = ds.params.nesterov;
  o.dampening = static_cast<float>(ds.params.dampening);
  if (!(o.lr >= 0)) ZT_THROW_INPUT(ds.source, ": optimizer.params.lr must not be negative");
}

void resolve_scheduler(const DsConfig& ds, const RunContext& run, TrainConfig& out) {
  out.scheduler = ds.scheduler;
  if (out.scheduler.empty()) return;
  out.origin["scheduler"] = ds.source;
  const ScheduleType type = *schedule_type_from_name(out.scheduler["type"].get<std::string>());
  json& p = out.scheduler["params"];
  for (auto& kv : p.items()) {
    if (!is_auto(kv.value())) continue;
    const SchedulerParamKey* k = scheduler_param(type, kv.key());
    switch (k ? k->auto_rule : SchedulerAuto::None) {
      case SchedulerAuto::None:  // validate_scheduler refused it
        break;
      case SchedulerAuto::Zero:
        kv.value() = 0.0;
        break;
      case SchedulerAuto::OptimizerLr:
        kv.value() = static_cast<double>(out.optimizer.lr);
        break;
      case SchedulerAuto::WarmupSteps:
        // A warmup_ratio needs the total; set_total_steps fills it once that is known.
        if (out.warmup_ratio > 0 && run.total_steps <= 0) continue;
        kv.value() = out.warmup_ratio > 0 ? static_cast<int64_t>(std::ceil(out.warmup_ratio * run.total_steps))
                                          : run.warmup_steps;
        break;
      case SchedulerAuto::TotalSteps:
        if (run.total_steps > 0) kv.value() = run.total_steps;  // else set_total_steps fills it
        break;
    }
    out.origin["scheduler.params." + kv.key()] = "auto";
  }
}

std::optional<DType> communication_dtype(const std::string& name) {
  if (name == "fp32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  if (name == "fp16") return DType::F16;
  return std::nullopt;  // "": the gradients' dtype (ds_config.cpp validated the name)
}

// zero_optimization from its table: each key's origin, "auto" sizes from the hidden size,
// overlap_comm's stage-dependent default; then the offload dicts.
void resolve_zero(const DsConfig& ds, const RunContext& run, TrainConfig& out) {
  auto& z = out.zero;
  z = ds.zero;
  const std::string pre = "zero_optimization.";
  for (const ZeroKey& k : zero_keys()) {
    if (k.type == KeyType::Object) continue;  // offload dicts: below
    const auto it = ds.zero_given.find(k.key);
    const Given given = it == ds.zero_given.end() ? Given::Absent : it->second;
    std::string& origin = out.origin[pre + k.key];
    if (given == Given::Set) {
      origin = ds.source;
    } else if (given == Given::Auto) {
      origin = "auto (hidden size " + std::to_string(run.hidden_size) + ")";
      set_key_value(k, auto_value(k.auto_rule, hidden_size(run, ds.source, pre + k.key)), z);
    } else {
      origin = k.key == "overlap_comm" ? "default (true for stage 3)" : "default";
    }
  }
  if (ds.zero_given.count("overlap_comm") == 0 || ds.zero_given.at("overlap_comm") != Given::Set)
    z.overlap_comm = z.stage == 3 ? zero::OverlapComm::On : zero::OverlapComm::Off;
  // The offload dicts came with z = ds.zero.
  if (ds.offload_optimizer_given == Given::Set) out.origin[pre + "offload_optimizer"] = ds.source;
  if (ds.offload_param_given == Given::Set) out.origin[pre + "offload_param"] = ds.source;
}

}  // namespace

constexpr int64_t kMaxTrainBatch = int64_t{1} << 36;

BatchSizes derive_batch_sizes(int64_t b, int64_t m, int64_t g, int world, const std::string& source) {
  ZT_CHECK(world >= 1, "world size ", world);
  const int64_t w = world;
  const auto need_divisible = [&](int64_t num, int64_t den, const char* what) {
    if (num % den != 0)
      ZT_THROW_INPUT(source, ": train_batch_size ", b, " is not divisible by ", what, " = ", den,
                     "; choose train_batch_size as a multiple of it, or give train_micro_batch_size_per_gpu and "
                     "gradient_accumulation_steps instead");
    return num / den;
  };
  // Products of values from files and flags: checked before they are compared or used.
  // A step's sequences times seq_len (at most 2^24) is its token count: the global batch
  // stays at most 2^36 sequences so that every count derived from it fits int64.
  const auto product = [&](std::initializer_list<int64_t> f) {
    const int64_t p =
        checked_product(f, source + ": train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size",
                        "lower the batch sizes");
    if (p > kMaxTrainBatch)
      ZT_THROW_INPUT(source, ": a global batch of ", p, " sequences is more than zerotrain supports (", kMaxTrainBatch,
                     "); lower the batch sizes");
    return p;
  };
  if (b > 0 && m > 0 && g > 0) {
    if (b != product({m, g, w}))
      ZT_THROW_INPUT(source, ": batch sizes are inconsistent: train_batch_size ", b,
                     " != train_micro_batch_size_per_gpu ", m, " * gradient_accumulation_steps ", g, " * world size ",
                     w, " = ", m * g * w, "; fix one of them or drop train_batch_size to have it derived");
    return {b, m, g};
  }
  if (b > 0 && m > 0) return {b, m, need_divisible(b, product({m, w}), "micro batch * world size")};
  if (b > 0 && g > 0) return {b, need_divisible(b, product({g, w}), "gradient_accumulation_steps * world size"), g};
  if (m > 0 && g > 0) return {product({m, g, w}), m, g};
  if (b > 0) return {b, need_divisible(b, w, "world size"), 1};
  if (m > 0) return {product({m, w}), m, 1};
  ZT_THROW_INPUT(source, ": batch size is underdetermined: give train_batch_size or train_micro_batch_size_per_gpu",
                 g > 0 ? " (gradient_accumulation_steps alone is not enough)" : "");
}

void resolve_ds_config(const DsConfig& ds, const RunContext& run, TrainConfig& out) {
  if (!ds.tensorboard_dir.empty() && out.tensorboard_dir.empty()) {  // report_to's, when both ask
    out.tensorboard_dir = ds.tensorboard_dir;
    out.tensorboard_tags = TrainConfig::TensorBoardTags::DeepSpeed;
  }
  out.csv_monitor_dir = ds.csv_monitor_dir;
  resolve_batch(ds, run, out);
  resolve_precision(ds, run, out);
  resolve_optimizer(ds, run, out);
  resolve_scheduler(ds, run, out);
  resolve_zero(ds, run, out);
  const auto& gc = ds.gradient_clipping();
  if (gc.is_set()) {
    if (run.max_grad_norm.is_set() && std::fabs(run.max_grad_norm.value - gc.value) > 1e-12)
      ZT_THROW_INPUT(ds.source, ": gradient_clipping is ", gc.value, " but ", run.run_source, " sets max_grad_norm to ",
                     run.max_grad_norm.value, "; set one of them (or write \"auto\" in the ds_config)");
    out.gradient_clipping = static_cast<float>(gc.value);
  } else {
    out.gradient_clipping = static_cast<float>(run.max_grad_norm.value);
  }
  out.origin["gradient_clipping"] = gc.is_set()                  ? ds.source
                                    : gc.is_auto()               ? "auto (max_grad_norm)"
                                    : run.max_grad_norm.is_set() ? run.run_source
                                                                 : "default";
  if (ds.steps_per_print().is_set()) {
    out.steps_per_print = ds.steps_per_print().value;
    out.origin["steps_per_print"] = ds.source;
  }
  if (ds.seed().is_set()) {
    out.seed = static_cast<uint64_t>(ds.seed().value);
    out.origin["seed"] = ds.source;
  }
  out.aio = ds.aio;
  for (const AioKey& k : aio_keys()) {
    const auto it = ds.aio_given.find(k.key);
    out.origin["aio." + k.key] = it != ds.aio_given.end() && it->second == Given::Set ? ds.source : "default";
  }
  out.activation_checkpointing = ds.activation_checkpointing;
  for (const CheckpointingKey& k : checkpointing_keys()) {
    const auto it = ds.checkpointing_given.find(k.key);
    out.origin["activation_checkpointing." + k.key] =
        it != ds.checkpointing_given.end() && it->second == Given::Set ? ds.source : "default";
  }
  if (ds.has_activation_checkpointing) {
    out.model.activation_checkpointing = true;
    out.origin["model.activation_checkpointing"] = ds.source + " (activation_checkpointing block)";
  }
  out.wall_clock_breakdown = ds.top.wall_clock_breakdown;
  out.memory_breakdown = ds.top.memory_breakdown;
  out.prescale_gradients = ds.top.prescale_gradients;
  out.gradient_predivide_factor = ds.top.gradient_predivide_factor;
  out.communication_data_type = ds.communication_data_type;
  out.zero.communication_dtype = communication_dtype(ds.communication_data_type);
  out.grad_accum_dtype = ds.grad_accum_dtype;
  out.dataloader_drop_last = ds.top.dataloader_drop_last;
  out.warnings.insert(out.warnings.end(), ds.warnings.begin(), ds.warnings.end());
}

}  // namespace zt::config
