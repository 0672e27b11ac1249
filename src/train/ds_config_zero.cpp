// ds_config "zero_optimization": stage 0-3, buckets, stage-3 knobs, offload dicts, the
// deprecated spellings DeepSpeed still maps, and ZeRO++/MiCS (refused when switched on).
#include <algorithm>
#include <utility>

#include "core/error.h"
#include "train/ds_config_internal.h"

namespace zt::train::detail {

using nlohmann::json;

namespace {

const char* kFix = "see docs/configs.md#zero_optimization";

// DeepSpeed's pydantic aliases: (alias, canonical). Old names keep working.
const std::vector<std::pair<std::string, std::string>> kAliases = {
    {"prefetch_bucket_size", "stage3_prefetch_bucket_size"},
    {"param_persistence_threshold", "stage3_param_persistence_threshold"},
    {"model_persistence_threshold", "stage3_model_persistence_threshold"},
    {"max_live_parameters", "stage3_max_live_parameters"},
    {"max_reuse_distance", "stage3_max_reuse_distance"},
    {"gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"},
    {"stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"},
    {"module_granularity_threshold", "stage3_module_granularity_threshold"},
    {"use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params"},
    {"cpu_offload_params", "cpu_offload_param"}};

const std::vector<std::string> kKnown = {
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
    "allgather_partitions", "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint",
    "offload_param", "offload_optimizer", "sub_group_size", "cpu_offload", "cpu_offload_param",
    "cpu_offload_use_pin_memory", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_model_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save", "stage3_module_granularity_threshold",
    "stage3_use_all_reduce_for_fetch_params", "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients",
    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
    "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size", "mics_hierarchical_params_gather",
    "memory_efficient_linear", "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings",
    // aliases
    "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold", "max_live_parameters",
    "max_reuse_distance", "gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
    "module_granularity_threshold", "use_all_reduce_for_fetch_params", "cpu_offload_params"};

OffloadDevice parse_device(const json& obj, const Where& w) {
  auto it = obj.find("device");
  if (it == obj.end() || it->is_null()) return OffloadDevice::None;
  const std::string d = read_string(obj, "device", w, "none").value;
  const std::string l = lower(d);
  if (l == "none") return OffloadDevice::None;
  if (l == "cpu") return OffloadDevice::CPU;
  if (l == "nvme") return OffloadDevice::NVMe;
  ZT_THROW_INPUT(w.key("device").str(), ": '", d, "' is not one of none, cpu, nvme",
                 did_you_mean(l, {"none", "cpu", "nvme"}));
}

DsOffload parse_offload(const json& z, const std::string& key, const Where& zw) {
  DsOffload o;
  o.buffer_count = key == "offload_param" ? 5 : 4;
  auto it = z.find(key);
  if (it == z.end() || it->is_null()) return o;
  const Where w = zw.key(key);
  const bool param = key == "offload_param";
  std::vector<std::string> known = {"device", "nvme_path", "buffer_count", "pin_memory"};
  if (param) {
    known.insert(known.end(), {"buffer_size", "max_in_cpu"});
  } else {
    known.insert(known.end(), {"pipeline_read", "pipeline_write", "fast_init", "ratio", "pipeline"});
  }
  check_known_keys(*it, known, w, std::string(kFix));
  o.given = Given::Set;
  o.device = parse_device(*it, w);
  o.nvme_path = read_string(*it, "nvme_path", w, "").value;
  o.buffer_count = static_cast<int>(read_int(*it, "buffer_count", w, o.buffer_count).value);
  o.pin_memory = read_bool(*it, "pin_memory", w, true).value;
  o.pipeline_read = read_bool(*it, "pipeline_read", w, false).value;
  o.pipeline_write = read_bool(*it, "pipeline_write", w, false).value;
  read_bool(*it, "pipeline", w, false);
  o.fast_init = read_bool(*it, "fast_init", w, false).value;
  o.ratio = read_number(*it, "ratio", w, 1.0).value;
  o.buffer_size = read_int(*it, "buffer_size", w, o.buffer_size).value;
  o.max_in_cpu = read_int(*it, "max_in_cpu", w, o.max_in_cpu).value;
  if (o.buffer_count < 1 || o.buffer_size < 1 || o.max_in_cpu < 0)
    ZT_THROW_INPUT(w.str(), ": buffer_count and buffer_size must be positive, max_in_cpu not negative");
  if (!(o.ratio > 0 && o.ratio <= 1)) ZT_THROW_INPUT(w.key("ratio").str(), ": must be in (0, 1]");
  if (o.device == OffloadDevice::NVMe && o.nvme_path.empty())
    ZT_THROW_INPUT(w.key("nvme_path").str(), ": device is nvme but nvme_path is missing; set it to a directory on a local NVMe drive");
  return o;
}

}  // namespace

void parse_zero_section(const json& doc, const Where& top, DsConfig& ds) {
  auto it = doc.find("zero_optimization");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("zero_optimization");
  check_known_keys(*it, kKnown, w, kFix);
  ds.has_zero_section = true;
  json z = *it;
  for (const auto& [alias, canonical] : kAliases) {
    if (!z.contains(alias)) continue;
    if (z.contains(canonical))
      ZT_THROW_INPUT(w.str(), ": both '", alias, "' and '", canonical, "' are given (the same setting); keep '",
                     canonical, "'");
    z[canonical] = z[alias];
    z.erase(alias);
  }

  auto& zs = ds.zero;
  const int64_t stage = read_int(z, "stage", w, 0).value;
  if (stage < 0 || stage > 3) ZT_THROW_INPUT(w.key("stage").str(), ": ZeRO stage must be 0, 1, 2 or 3, got ", stage);
  ds.stage = zs.stage = static_cast<int>(stage);

  zs.contiguous_gradients = read_bool(z, "contiguous_gradients", w, true).value;
  zs.reduce_scatter = read_bool(z, "reduce_scatter", w, true).value;
  ds.reduce_bucket_size = read_int(z, "reduce_bucket_size", w, 500000000, AutoOk::Yes);
  zs.allgather_partitions = read_bool(z, "allgather_partitions", w, true).value;
  zs.allgather_bucket_size = read_int(z, "allgather_bucket_size", w, 500000000).value;
  ds.overlap_comm = read_bool(z, "overlap_comm", w, false);
  zs.load_from_fp32_weights = read_bool(z, "load_from_fp32_weights", w, true).value;
  zs.elastic_checkpoint = read_bool(z, "elastic_checkpoint", w, false).value;
  zs.sub_group_size = read_int(z, "sub_group_size", w, 1000000000).value;
  zs.round_robin_gradients = read_bool(z, "round_robin_gradients", w, false).value;
  zs.ignore_unused_parameters = read_bool(z, "ignore_unused_parameters", w, true).value;
  ds.stage3_prefetch_bucket_size = read_int(z, "stage3_prefetch_bucket_size", w, 50000000, AutoOk::Yes);
  ds.stage3_param_persistence_threshold = read_int(z, "stage3_param_persistence_threshold", w, 100000, AutoOk::Yes);
  zs.stage3_model_persistence_threshold =
      read_int(z, "stage3_model_persistence_threshold", w, zs.stage3_model_persistence_threshold).value;
  zs.stage3_max_live_parameters = read_int(z, "stage3_max_live_parameters", w, 1000000000).value;
  zs.stage3_max_reuse_distance = read_int(z, "stage3_max_reuse_distance", w, 1000000000).value;
  zs.stage3_gather_16bit_weights_on_model_save =
      read_bool(z, "stage3_gather_16bit_weights_on_model_save", w, false).value;
  // Accepted, no effect: zerotrain's units already decide these.
  read_bool(z, "use_multi_rank_bucket_allreduce", w, true);
  read_bool(z, "memory_efficient_linear", w, true);
  read_bool(z, "pipeline_loading_checkpoint", w, false);
  read_bool(z, "override_module_apply", w, true);
  read_bool(z, "log_trace_cache_warnings", w, false);
  read_int(z, "stage3_module_granularity_threshold", w, 0);
  read_bool(z, "stage3_use_all_reduce_for_fetch_params", w, false);
  for (const char* key : {"reduce_bucket_size", "allgather_bucket_size", "sub_group_size",
                          "stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance"}) {
    if (read_int(z, key, w, 1, AutoOk::Yes).value < 1) ZT_THROW_INPUT(w.key(key).str(), ": must be positive");
  }
  if (read_int(z, "stage3_param_persistence_threshold", w, 0, AutoOk::Yes).value < 0)
    ZT_THROW_INPUT(w.key("stage3_param_persistence_threshold").str(), ": must not be negative");

  if (read_bool(z, "legacy_stage1", w, false).value)
    ZT_THROW_UNSUPPORTED(w.key("legacy_stage1").str(), ": DeepSpeed's legacy stage-1 implementation is not supported; remove the key (stage 1 is the current one)");
  // ZeRO++ and MiCS: refused when on, so configs that spell out the defaults still load.
  const auto zeropp = [&](const std::string& key, bool on, const std::string& what) {
    if (on)
      ZT_THROW_UNSUPPORTED(w.key(key).str(), ": ", what,
                           " is not supported by zerotrain; remove the key (plain ZeRO stage 1-3 collectives are used)");
  };
  zeropp("zero_hpz_partition_size", read_int(z, "zero_hpz_partition_size", w, 1).value > 1,
         "ZeRO++ hierarchical partitioning (hpZ)");
  zeropp("zero_quantized_weights", read_bool(z, "zero_quantized_weights", w, false).value,
         "ZeRO++ quantized weights (qwZ)");
  zeropp("zero_quantized_nontrainable_weights", read_bool(z, "zero_quantized_nontrainable_weights", w, false).value,
         "ZeRO++ quantized non-trainable weights");
  zeropp("zero_quantized_gradients", read_bool(z, "zero_quantized_gradients", w, false).value,
         "ZeRO++ quantized gradients (qgZ)");
  zeropp("zeropp_loco_param", z.contains("zeropp_loco_param") && !z["zeropp_loco_param"].is_null(),
         "ZeRO++ LoCo");
  zeropp("mics_shard_size", read_int(z, "mics_shard_size", w, -1).value > 0, "MiCS sharding");
  zeropp("mics_hierarchical_params_gather", read_bool(z, "mics_hierarchical_params_gather", w, false).value,
         "MiCS hierarchical gather");

  // Offload dicts, and the deprecated booleans DeepSpeed still maps onto them.
  ds.offload_optimizer = parse_offload(z, "offload_optimizer", w);
  ds.offload_param = parse_offload(z, "offload_param", w);
  const bool cpu_offload = read_bool(z, "cpu_offload", w, false).value;
  const bool cpu_offload_param = read_bool(z, "cpu_offload_param", w, false).value;
  const auto pin = read_bool(z, "cpu_offload_use_pin_memory", w, true);
  if (cpu_offload) {
    if (ds.offload_optimizer.given == Given::Set)
      ZT_THROW_INPUT(w.key("cpu_offload").str(), ": deprecated spelling of offload_optimizer.device=cpu, and offload_optimizer is also given; keep offload_optimizer");
    ds.offload_optimizer.given = Given::Set;
    ds.offload_optimizer.device = OffloadDevice::CPU;
    if (pin.is_set()) ds.offload_optimizer.pin_memory = pin.value;
  }
  if (cpu_offload_param) {
    if (ds.offload_param.given == Given::Set)
      ZT_THROW_INPUT(w.key("cpu_offload_param").str(), ": deprecated spelling of offload_param.device=cpu, and offload_param is also given; keep offload_param");
    ds.offload_param.given = Given::Set;
    ds.offload_param.device = OffloadDevice::CPU;
    if (pin.is_set()) ds.offload_param.pin_memory = pin.value;
  }
  if (ds.offload_param.device != OffloadDevice::None && stage != 3)
    ZT_THROW_INPUT(w.key("offload_param").str(), ": parameter offload needs ZeRO stage 3 (stage is ", stage,
                   "); set zero_optimization.stage to 3 or remove offload_param");
  if (ds.offload_optimizer.device != OffloadDevice::None && stage == 0)
    ZT_THROW_INPUT(w.key("offload_optimizer").str(),
                   ": optimizer offload needs ZeRO stage 1, 2 or 3; set zero_optimization.stage or remove offload_optimizer");
}

}  // namespace zt::train::detail
