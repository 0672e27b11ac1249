// The zero_optimization table: every key DeepSpeed 0.19 reads there, with its default,
// "auto" rule, status, target field and doc line (see config_keys.h for what derives
// from it). The offload dicts and the deprecated cpu_offload* booleans have their own
// parser (ds_config_zero.cpp): their rows carry the docs and the known-key check.
#include <climits>
#include <cmath>

#include "core/error.h"
#include "config/config_keys.h"

namespace zt::config {

namespace {

constexpr double kNoMin = kNoMinimum;

using Z = ZeroSection;

// A row that warns `why` when `inert` says so, and that `config check` prints per `shown`.
ZeroKey with_warning(ZeroKey k, InertWhen inert, std::string why, Shown shown) {
  k.inert_when = inert;
  k.inert_why = std::move(why);
  k.shown = shown;
  return k;
}

ZeroKey resolved(std::string key, std::vector<std::string> aliases, KeyType type, double dflt, std::string dflt_text,
                 double min, AutoRule rule, KeyField<Z> target, InertWhen inert, std::string why, Shown shown,
                 std::string doc) {
  return with_warning(key_row<Z>(std::move(key), std::move(aliases), type, dflt, std::move(dflt_text), min, rule,
                                 KeyStatus::Resolved, target, std::move(doc)),
                      inert, std::move(why), shown);
}

// Accepted without effect: kept (when a field exists) so the warning can say so.
ZeroKey accepted(std::string key, std::vector<std::string> aliases, KeyType type, double dflt, std::string dflt_text,
                 double min, KeyField<Z> target, InertWhen inert, std::string why, Shown shown, std::string doc) {
  return with_warning(key_row<Z>(std::move(key), std::move(aliases), type, dflt, std::move(dflt_text), min,
                                 AutoRule::None, KeyStatus::Accepted, target, std::move(doc)),
                      inert, std::move(why), shown);
}

// Accepted silently: zerotrain's flat units make the choice the key tunes.
ZeroKey decided(std::string key, std::vector<std::string> aliases, KeyType type, double dflt) {
  std::string text = type == KeyType::Bool ? (dflt != 0 ? "true" : "false") : std::to_string(saturating_int64(dflt));
  return key_row<Z>(std::move(key), std::move(aliases), type, dflt, std::move(text), kNoMin, AutoRule::None,
                    KeyStatus::Accepted, std::monostate{}, "accepted: zerotrain's flat units decide this");
}

// `message`: the Unsupported error after "zero_optimization.KEY: ".
ZeroKey refused(std::string key, KeyType type, double dflt, std::string dflt_text, int64_t above, std::string message,
                std::string doc) {
  ZeroKey k = key_row<Z>(std::move(key), {}, type, dflt, std::move(dflt_text), kNoMin, AutoRule::None,
                         KeyStatus::Refused, std::monostate{}, std::move(doc));
  k.refuse_above = above;
  k.refused_what = std::move(message);
  return k;
}

// ZeRO++ and MiCS: refused when on, so configs that spell out the defaults still load.
std::string unsupported(const std::string& what) {
  return what + " is not supported by zerotrain; remove the key (plain ZeRO stage 1-3 collectives are used)";
}

// Read by ds_config_zero.cpp's offload parser (objects, deprecated booleans).
ZeroKey offload(std::string key, std::vector<std::string> aliases, KeyType type, double dflt, std::string dflt_text,
                KeyStatus status, std::string doc) {
  return key_row<Z>(std::move(key), std::move(aliases), type, dflt, std::move(dflt_text), kNoMin, AutoRule::None,
                    status, std::monostate{}, std::move(doc));
}

std::vector<ZeroKey> make_table() {
  const auto B = KeyType::Bool;
  const auto I = KeyType::Int;
  const auto N = InertWhen::NotDefault;
  return {
      resolved("stage", {}, I, 0, "0", 0, AutoRule::None, &Z::stage, InertWhen::Never, "", Shown::Always,
               "resolved (0, 1, 2, 3)"),
      // Absent: true for stage 3, else false (resolve_zero decides once the stage is known).
      resolved("overlap_comm", {}, B, 0, "true for stage 3, else false", kNoMin, AutoRule::None, &Z::overlap_comm,
               InertWhen::WrittenTrueOneProcess, "one process has no communication to overlap", Shown::Always,
               "resolved; written with one process it warns"),
      accepted("contiguous_gradients", {}, B, 1, "true", kNoMin, &Z::contiguous_gradients, N,
               "gradients are always one flat buffer per unit", Shown::Always,
               "accepted: gradients are one flat buffer per unit (false warns)"),
      accepted("reduce_scatter", {}, B, 1, "true", kNoMin, &Z::reduce_scatter, N,
               "stages 1-3 always reduce-scatter gradients", Shown::Always,
               "accepted: stages 1-3 always reduce-scatter (false warns)"),
      resolved("reduce_bucket_size", {}, I, 500000000, "5e8", 1, AutoRule::HiddenSquared, &Z::reduce_bucket_size,
               InertWhen::NotDefaultOneProcess, "one process reduces nothing", Shown::Always,
               "resolved (auto ok: h*h); warns with one process"),
      accepted("allgather_partitions", {}, B, 1, "true", kNoMin, &Z::allgather_partitions, N,
               "updated partitions are always all-gathered", Shown::No,
               "accepted: updated partitions are always all-gathered (false warns)"),
      accepted("allgather_bucket_size", {}, I, 500000000, "5e8", 1, &Z::allgather_bucket_size, N,
               "parameters are gathered one unit at a time", Shown::Always,
               "accepted: parameters are gathered per unit (another value warns)"),
      accepted("round_robin_gradients", {}, B, 0, "false", kNoMin, &Z::round_robin_gradients, N,
               "gradient partitions are contiguous slices", Shown::No, "accepted (true warns)"),
      accepted("load_from_fp32_weights", {}, B, 1, "true", kNoMin, &Z::load_from_fp32_weights, N,
               "checkpoints always restore the f32 master weights they hold", Shown::No,
               "accepted: checkpoints restore their f32 master (false warns)"),
      accepted("elastic_checkpoint", {}, B, 0, "false", kNoMin, &Z::elastic_checkpoint, N,
               "checkpoints load at any world size anyway", Shown::No,
               "accepted: checkpoints load at any world size anyway (true warns)"),
      resolved("sub_group_size", {}, I, 1000000000, "1e9", 1, AutoRule::None, &Z::sub_group_size,
               InertWhen::NotDefaultWithoutNvme, "it sizes the NVMe swaps of offload_optimizer nvme", Shown::Always,
               "resolved: with offload_optimizer nvme, the most elements of one swapped piece of state (a unit "
               "is stepped in pieces of at most this); otherwise another value warns"),
      accepted("ignore_unused_parameters", {}, B, 1, "true", kNoMin, &Z::ignore_unused_parameters, N,
               "every parameter gets a gradient", Shown::No, "accepted (false warns)"),
      resolved("stage3_prefetch_bucket_size", {"prefetch_bucket_size"}, I, 50000000, "5e7", 1,
               AutoRule::NineTenthsHiddenSquared, &Z::stage3_prefetch_bucket_size, InertWhen::NotDefaultBelowStage3,
               "stage 3 only", Shown::Stage3, "resolved (auto ok: 0.9*h*h)"),
      resolved("stage3_param_persistence_threshold", {"param_persistence_threshold"}, I, 100000, "1e5", 0,
               AutoRule::TenHidden, &Z::stage3_param_persistence_threshold, InertWhen::NotDefaultBelowStage3,
               "stage 3 only", Shown::Stage3, "resolved (auto ok: 10*h)"),
      accepted("stage3_model_persistence_threshold", {"model_persistence_threshold"}, I, INT64_MAX, "max", kNoMin,
               &Z::stage3_model_persistence_threshold, N, "persistence is decided per unit", Shown::No,
               "accepted: persistence is per unit (another value warns)"),
      resolved("stage3_max_live_parameters", {"max_live_parameters"}, I, 1000000000, "1e9", 1, AutoRule::None,
               &Z::stage3_max_live_parameters, InertWhen::NotDefaultBelowStage3, "stage 3 only", Shown::Stage3,
               "resolved"),
      accepted("stage3_max_reuse_distance", {"max_reuse_distance"}, I, 1000000000, "1e9", 1,
               &Z::stage3_max_reuse_distance, N, "released units are gathered again when next used", Shown::Stage3,
               "accepted (another value warns)"),
      resolved("stage3_gather_16bit_weights_on_model_save",
               {"gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"}, B, 0, "false",
               kNoMin, AutoRule::None, &Z::stage3_gather_16bit_weights_on_model_save, InertWhen::NotDefaultBelowStage3,
               "below stage 3 every rank holds the full model, which final/ is always written from", Shown::Stage3,
               "resolved"),
      offload("offload_optimizer", {}, KeyType::Object, 0, "none", KeyStatus::Resolved,
              "resolved; needs stage >= 1 (table below); `device: cpu` runs ZeRO-Offload (state and step on "
              "the host, `ratio` of it; `pin_memory`); `device: nvme` swaps that host state to `nvme_path` (`buffer_count`, "
              "`pipeline_read`, `pipeline_write`; the aio section)"),
      offload("offload_param", {}, KeyType::Object, 0, "none", KeyStatus::Resolved,
              "resolved; needs stage 3; together with offload_optimizer cpu or nvme (ratio 1) `device: cpu` keeps the "
              "16-bit partitions in host memory (`pin_memory`) and `device: nvme` swaps those past `max_in_cpu` elements "
              "to `nvme_path` (`buffer_count`, `buffer_size`; the aio section); alone: warns"),
      offload("cpu_offload", {}, B, 0, "false", KeyStatus::Mapped,
              "deprecated: mapped to `offload_optimizer.device: cpu`"),
      offload("cpu_offload_param", {"cpu_offload_params"}, B, 0, "false", KeyStatus::Mapped,
              "deprecated: mapped to `offload_param.device: cpu`"),
      offload("cpu_offload_use_pin_memory", {}, B, 1, "true", KeyStatus::Mapped,
              "deprecated: mapped to the offload dicts' `pin_memory`"),
      decided("use_multi_rank_bucket_allreduce", {}, B, 1),
      decided("memory_efficient_linear", {}, B, 1),
      decided("pipeline_loading_checkpoint", {}, B, 0),
      decided("override_module_apply", {}, B, 1),
      decided("log_trace_cache_warnings", {}, B, 0),
      decided("stage3_module_granularity_threshold", {"module_granularity_threshold"}, I, 0),
      decided("stage3_use_all_reduce_for_fetch_params", {"use_all_reduce_for_fetch_params"}, B, 0),
      refused("legacy_stage1", B, 0, "false", 0,
              "DeepSpeed's legacy stage-1 implementation is not supported; remove the key (stage 1 is the current one)",
              "refused when true"),
      refused("zero_hpz_partition_size", I, 1, "1", 1, unsupported("ZeRO++ hierarchical partitioning (hpZ)"),
              "refused when > 1 (ZeRO++ hpZ)"),
      refused("zero_quantized_weights", B, 0, "false", 0, unsupported("ZeRO++ quantized weights (qwZ)"),
              "refused when true (ZeRO++)"),
      refused("zero_quantized_nontrainable_weights", B, 0, "false", 0,
              unsupported("ZeRO++ quantized non-trainable weights"), "refused when true (ZeRO++)"),
      refused("zero_quantized_gradients", B, 0, "false", 0, unsupported("ZeRO++ quantized gradients (qgZ)"),
              "refused when true (ZeRO++)"),
      refused("zeropp_loco_param", KeyType::Any, 0, "null", 0, unsupported("ZeRO++ LoCo"), "refused when set (ZeRO++)"),
      refused("mics_shard_size", I, -1, "-1", 0, unsupported("MiCS sharding"), "refused when > 0 (MiCS)"),
      refused("mics_hierarchical_params_gather", B, 0, "false", 0, unsupported("MiCS hierarchical gather"),
              "refused when true (MiCS)"),
  };
}

}  // namespace

const std::vector<ZeroKey>& zero_keys() {
  static const std::vector<ZeroKey> table = make_table();
  return table;
}

int64_t auto_value(AutoRule rule, int64_t hidden) {
  const double h = static_cast<double>(hidden);
  switch (rule) {
    case AutoRule::HiddenSquared:
      return static_cast<int64_t>(1.0 * std::pow(h, 2));
    case AutoRule::NineTenthsHiddenSquared:
      return static_cast<int64_t>(0.9 * std::pow(h, 2));
    case AutoRule::TenHidden:
      return static_cast<int64_t>(10.0 * std::pow(h, 1));
    case AutoRule::RunPrecision:  // decided by resolve_ds_config from the run
    case AutoRule::FromRun:
    case AutoRule::None:
      break;
  }
  ZT_CHECK(false, "no auto rule");
  return 0;
}

std::string auto_rule_text(AutoRule rule) {
  switch (rule) {
    case AutoRule::HiddenSquared:
      return "h * h";
    case AutoRule::NineTenthsHiddenSquared:
      return "0.9 * h * h";
    case AutoRule::TenHidden:
      return "10 * h";
    case AutoRule::RunPrecision:
      return "the run's bf16/fp16 flag";
    case AutoRule::FromRun:
      return "the run's own setting";
    case AutoRule::None:
      break;
  }
  return "";
}

}  // namespace zt::config
