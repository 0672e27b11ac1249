#include "config/accelerate_config.h"

#include <algorithm>

#include "core/error.h"
#include "config/config_keys.h"
#include "config/ds_config.h"

namespace zt::config {

using nlohmann::json;

namespace {

const char* kFix = "see docs/configs.md#accelerate-yaml";

// The known keys and the plugin's DeepSpeed settings: config_keys_accelerate.cpp's rows.
const std::vector<std::string>& plugin_keys() {
  static const std::vector<std::string> keys = accelerate_key_names(accelerate_deepspeed_keys());
  return keys;
}

bool is_plugin_key(const std::string& key) {
  const auto& keys = plugin_keys();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

bool has(const json& j, const std::string& k) { return j.contains(k) && !j[k].is_null(); }

// Sets doc[path...] = v unless the YAML already says something else there.
void set_ds(json& doc, const std::vector<std::string>& path, const json& v, const Where& from,
            const std::string& source) {
  json* node = &doc;
  std::string dotted;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    dotted += path[i] + ".";
    if (!node->contains(path[i]) || (*node)[path[i]].is_null()) (*node)[path[i]] = json::object();
    node = &(*node)[path[i]];
  }
  dotted += path.back();
  if (node->contains(path.back()) && !(*node)[path.back()].is_null() && (*node)[path.back()] != v)
    ZT_THROW_INPUT(from.str(), ": says ", v.dump(), " but ", source, ": deepspeed_config.", dotted, " says ",
                   (*node)[path.back()].dump(), "; keep one of them");
  (*node)[path.back()] = v;
}

std::string device_value(const json& dc, const std::string& key, const Where& w) {
  const std::string d = lower(read_string(dc, key, w, "none").value);
  if (d != "none" && d != "cpu" && d != "nvme")
    ZT_THROW_INPUT(w.key(key).str(), ": '", d, "' is not one of none, cpu, nvme",
                   did_you_mean(d, {"none", "cpu", "nvme"}));
  return d;
}

void parse_deepspeed(const json& dc, const Where& w, const std::string& source, AccelerateConfig& acc) {
  std::vector<std::string> known = plugin_keys();
  const auto& ds_keys = ds_top_level_keys();
  known.insert(known.end(), ds_keys.begin(), ds_keys.end());
  check_known_keys(dc, known, w, kFix);
  json& ds = acc.ds_doc;
  // Inline DeepSpeed sections first; plugin keys must agree with them.
  for (const auto& kv : dc.items()) {
    if (is_plugin_key(kv.key())) continue;
    ds[kv.key()] = kv.value();
    acc.ds_keys_in_yaml.push_back(w.key(kv.key()).path);
  }
  for (const AccelerateKey& k : accelerate_deepspeed_keys())
    if (k.ds_setting && has(dc, k.key) &&
        std::find(acc.ds_keys_in_yaml.begin(), acc.ds_keys_in_yaml.end(), w.key(k.key).path) ==
            acc.ds_keys_in_yaml.end())
      acc.ds_keys_in_yaml.push_back(w.key(k.key).path);

  if (has(dc, "zero_stage")) {
    const int64_t stage = read_int(dc, "zero_stage", w, 2).value;
    if (stage < 0 || stage > 3) ZT_THROW_INPUT(w.key("zero_stage").str(), ": must be 0, 1, 2 or 3, got ", stage);
    set_ds(ds, {"zero_optimization", "stage"}, stage, w.key("zero_stage"), source);
  }
  for (const std::string which : {"optimizer", "param"}) {
    const std::string dev_key = "offload_" + which + "_device", path_key = "offload_" + which + "_nvme_path";
    if (has(dc, dev_key)) {
      const std::string d = device_value(dc, dev_key, w);
      if (d != "none" || has(ds, "zero_optimization"))
        set_ds(ds, {"zero_optimization", "offload_" + which, "device"}, d, w.key(dev_key), source);
    }
    if (has(dc, path_key))
      set_ds(ds, {"zero_optimization", "offload_" + which, "nvme_path"}, read_string(dc, path_key, w, "").value,
             w.key(path_key), source);
  }
  if (has(dc, "gradient_accumulation_steps")) {
    const int64_t g = read_int(dc, "gradient_accumulation_steps", w, 1).value;
    if (g < 1) ZT_THROW_INPUT(w.key("gradient_accumulation_steps").str(), ": must be at least 1");
    ds["gradient_accumulation_steps"] = g;  // same key inline and as plugin key
  }
  if (has(dc, "gradient_clipping")) ds["gradient_clipping"] = read_number(dc, "gradient_clipping", w, 1.0).value;
  if (has(dc, "zero3_save_16bit_model"))
    set_ds(ds, {"zero_optimization", "stage3_gather_16bit_weights_on_model_save"},
           read_bool(dc, "zero3_save_16bit_model", w, false).value, w.key("zero3_save_16bit_model"), source);
  acc.zero3_init = read_bool(dc, "zero3_init_flag", w, false).value;
  acc.launch.deepspeed_hostfile = read_string(dc, "deepspeed_hostfile", w, "").value;
  acc.launch.deepspeed_multinode_launcher = read_string(dc, "deepspeed_multinode_launcher", w, "").value;
  acc.launch.deepspeed_inclusion_filter = read_string(dc, "deepspeed_inclusion_filter", w, "").value;
  acc.launch.deepspeed_exclusion_filter = read_string(dc, "deepspeed_exclusion_filter", w, "").value;
  if (!acc.launch.deepspeed_multinode_launcher.empty()) {
    const std::vector<std::string> launchers = {"pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh", "slurm"};
    const std::string l = lower(acc.launch.deepspeed_multinode_launcher);
    if (std::find(launchers.begin(), launchers.end(), l) == launchers.end())
      ZT_THROW_INPUT(w.key("deepspeed_multinode_launcher").str(), ": '", l,
                     "' is not one of pdsh, standard, openmpi, mvapich, mpich, nossh, slurm",
                     did_you_mean(l, launchers));
  }

  const std::string file = read_string(dc, "deepspeed_config_file", w, "").value;
  if (!file.empty()) {
    // As written: load_train_config places it (relative to the YAML, as every path written
    // in a config file; config_paths.h), knowing whether the command line gave it.
    acc.deepspeed_config_file = file;
    return;
  }
  // As Accelerate builds the plugin's config: batch sizes from the run, stage 2 default.
  if (!has(ds, "train_batch_size") && !has(ds, "train_micro_batch_size_per_gpu")) {
    ds["train_batch_size"] = "auto";
    ds["train_micro_batch_size_per_gpu"] = "auto";
  }
  if (!has(ds, "gradient_accumulation_steps")) ds["gradient_accumulation_steps"] = "auto";
  if (!has(ds, "zero_optimization") || !has(ds["zero_optimization"], "stage")) ds["zero_optimization"]["stage"] = 2;
}

// FSDP maps onto ZeRO: FULL_SHARD = stage 3, SHARD_GRAD_OP = stage 2, NO_SHARD = stage 0.
void parse_fsdp(const json& fc, const Where& w, AccelerateConfig& acc) {
  check_known_keys(
      fc,
      {"fsdp_version", "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_offload_params",
       "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params", "fsdp_state_dict_type",
       "fsdp_activation_checkpointing", "fsdp_backward_prefetch", "fsdp_forward_prefetch", "fsdp_use_orig_params",
       "fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_backward_prefetch_policy"},
      w, kFix);
  int stage = 3;
  if (has(fc, "fsdp_sharding_strategy")) {
    const json& s = fc["fsdp_sharding_strategy"];
    const std::string name =
        s.is_number() ? std::to_string(s.get<int>()) : lower(read_string(fc, "fsdp_sharding_strategy", w, "").value);
    if (name == "1" || name == "full_shard")
      stage = 3;
    else if (name == "2" || name == "shard_grad_op")
      stage = 2;
    else if (name == "3" || name == "no_shard")
      stage = 0;
    else if (name == "4" || name == "5" || name == "hybrid_shard" || name == "hybrid_shard_zero2")
      ZT_THROW_UNSUPPORTED(w.key("fsdp_sharding_strategy").str(),
                           ": hybrid sharding is not supported by zerotrain; use FULL_SHARD or SHARD_GRAD_OP");
    else
      ZT_THROW_INPUT(w.key("fsdp_sharding_strategy").str(), ": '", name,
                     "' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD");
  } else if (has(fc, "fsdp_reshard_after_forward")) {
    stage = read_bool(fc, "fsdp_reshard_after_forward", w, true).value ? 3 : 2;
  }
  json& ds = acc.ds_doc;
  ds["train_batch_size"] = "auto";
  ds["train_micro_batch_size_per_gpu"] = "auto";
  ds["gradient_accumulation_steps"] = "auto";
  ds["zero_optimization"]["stage"] = stage;
  if (read_bool(fc, "fsdp_offload_params", w, false).value) {
    if (stage == 0)
      ZT_THROW_INPUT(w.key("fsdp_offload_params").str(), ": offload needs sharding; use FULL_SHARD or SHARD_GRAD_OP");
    ds["zero_optimization"]["offload_optimizer"]["device"] = "cpu";
    if (stage == 3) ds["zero_optimization"]["offload_param"]["device"] = "cpu";
  }
  const std::string sd = read_string(fc, "fsdp_state_dict_type", w, "FULL_STATE_DICT").value;
  if (stage == 3) ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = sd == "FULL_STATE_DICT";
  acc.activation_checkpointing = read_bool(fc, "fsdp_activation_checkpointing", w, false).value;
  acc.zero3_init = stage == 3 && read_bool(fc, "fsdp_cpu_ram_efficient_loading", w, false).value;
}

}  // namespace

const std::vector<std::string>& accelerate_top_level_keys() {
  static const std::vector<std::string> keys = accelerate_key_names(accelerate_keys());
  return keys;
}

AccelerateConfig parse_accelerate_config(const json& doc, const std::string& source) {
  AccelerateConfig acc;
  acc.source = source;
  const Where top{source, ""};
  check_known_keys(doc, accelerate_top_level_keys(), top, kFix);

  const std::string env = read_string(doc, "compute_environment", top, "LOCAL_MACHINE").value;
  if (env == "AMAZON_SAGEMAKER")
    ZT_THROW_UNSUPPORTED(
        top.key("compute_environment").str(),
        ": SageMaker launching is not supported; use LOCAL_MACHINE (and mpirun/srun via zerotrain launch)");
  if (env != "LOCAL_MACHINE")
    ZT_THROW_INPUT(top.key("compute_environment").str(), ": '", env, "' is not LOCAL_MACHINE",
                   did_you_mean(env, {"LOCAL_MACHINE"}));

  auto& l = acc.launch;
  const std::vector<std::string> supported = {"NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP"};
  const std::vector<std::string> refused = {"XLA",        "TPU",        "MEGATRON_LM", "MULTI_NPU", "MULTI_MLU",
                                            "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU",   "MULTI_HPU"};
  l.distributed_type = read_string(doc, "distributed_type", top, "NO").value;
  if (std::find(refused.begin(), refused.end(), l.distributed_type) != refused.end())
    ZT_THROW_UNSUPPORTED(top.key("distributed_type").str(), ": ", l.distributed_type,
                         " is not supported by zerotrain; use NO, MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP");
  if (std::find(supported.begin(), supported.end(), l.distributed_type) == supported.end())
    ZT_THROW_INPUT(top.key("distributed_type").str(), ": unknown value '", l.distributed_type, "'",
                   did_you_mean(l.distributed_type, supported), "; use NO, MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP");

  if (has(doc, "mixed_precision")) {
    // Unquoted `no` is a boolean false in YAML 1.1; Accelerate means "no" by it.
    const json& mp = doc["mixed_precision"];
    const std::string m =
        mp.is_boolean() && !mp.get<bool>() ? "no" : lower(read_string(doc, "mixed_precision", top, "no").value);
    if (m == "fp8")
      ZT_THROW_UNSUPPORTED(top.key("mixed_precision").str(), ": fp8 training is not supported; use bf16 or fp16");
    if (m != "no" && m != "fp16" && m != "bf16")
      ZT_THROW_INPUT(top.key("mixed_precision").str(), ": '", m, "' is not one of no, fp16, bf16",
                     did_you_mean(m, {"no", "fp16", "bf16"}));
    acc.mixed_precision = Setting<Precision>(Given::Set, m == "fp16"   ? Precision::F16
                                                         : m == "bf16" ? Precision::BF16
                                                                       : Precision::F32);
  }
  acc.use_cpu = read_bool(doc, "use_cpu", top, false).value;
  l.num_processes = static_cast<int>(read_int(doc, "num_processes", top, 0).value);
  l.num_machines = static_cast<int>(read_int(doc, "num_machines", top, 1).value);
  l.machine_rank = static_cast<int>(read_int(doc, "machine_rank", top, 0).value);
  l.main_process_ip = read_string(doc, "main_process_ip", top, "").value;
  l.main_process_port = static_cast<int>(read_int(doc, "main_process_port", top, 29500).value);
  l.gpu_ids = read_string(doc, "gpu_ids", top, "").value;
  if (has(doc, "num_processes") && l.num_processes < 1)
    ZT_THROW_INPUT(top.key("num_processes").str(), ": must be at least 1 (it counts processes over all machines)");
  if (l.num_machines < 1) ZT_THROW_INPUT(top.key("num_machines").str(), ": must be at least 1");
  if (l.machine_rank < 0 || l.machine_rank >= l.num_machines)
    ZT_THROW_INPUT(top.key("machine_rank").str(), ": must be in 0..num_machines-1 (", l.num_machines - 1, ")");
  if (l.main_process_port < 1 || l.main_process_port > 65535)
    ZT_THROW_INPUT(top.key("main_process_port").str(), ": must be a port number in 1..65535");
  if (l.num_processes > 0 && l.num_processes % l.num_machines != 0)
    ZT_THROW_INPUT(top.key("num_processes").str(), ": ", l.num_processes, " processes do not split evenly over ",
                   l.num_machines, " machines; num_processes is the total over all machines");
  for (const char* key : {"same_network", "tpu_use_cluster", "tpu_use_sudo"}) read_bool(doc, key, top, false);
  // Switched on, these would change what Accelerate does; here they change nothing.
  const std::pair<const char*, const char*> inert[] = {
      {"downcast_bf16", "it is for TPUs"},
      {"debug", "collectives are checked by their deadlines and a failing rank ends the job"},
      {"enable_cpu_affinity", "the launcher leaves CPU binding to mpirun / srun"}};
  for (const auto& [key, why] : inert)
    if (read_bool(doc, key, top, false).value)
      acc.warnings.push_back(top.key(key).str() + ": accepted but has no effect (" + why + ")");
  if (has(doc, "dynamo_config") && doc["dynamo_config"].is_object()) {
    const std::string backend =
        read_string(doc["dynamo_config"], "dynamo_backend", top.key("dynamo_config"), "NO").value;
    if (lower(backend) != "no")
      acc.warnings.push_back(top.key("dynamo_config").str() +
                             ": accepted but has no effect (zerotrain compiles ahead of time)");
  }

  // Top-level fp16/bf16 blocks: DeepSpeed's schema, written here by users; mapped.
  for (const AccelerateKey& k : accelerate_keys()) {
    if (!k.ds_setting) continue;
    const std::string& key = k.key;
    if (!has(doc, key)) continue;
    require_object(doc[key], top.key(key));
    acc.ds_doc[key] = doc[key];
    acc.ds_keys_in_yaml.push_back(key);
  }
  if (has(doc, "deepspeed_config")) {
    if (l.distributed_type != "DEEPSPEED")
      ZT_THROW_INPUT(top.key("deepspeed_config").str(), ": only used with distributed_type: DEEPSPEED (it is ",
                     l.distributed_type, "); set distributed_type: DEEPSPEED or remove the block");
    require_object(doc["deepspeed_config"], top.key("deepspeed_config"));
    parse_deepspeed(doc["deepspeed_config"], top.key("deepspeed_config"), source, acc);
  } else if (l.distributed_type == "DEEPSPEED") {
    parse_deepspeed(json::object(), top.key("deepspeed_config"), source, acc);
  }
  if (has(doc, "fsdp_config")) {
    if (l.distributed_type != "FSDP")
      ZT_THROW_INPUT(top.key("fsdp_config").str(), ": only used with distributed_type: FSDP (it is ",
                     l.distributed_type, "); set distributed_type: FSDP or remove the block");
    require_object(doc["fsdp_config"], top.key("fsdp_config"));
    parse_fsdp(doc["fsdp_config"], top.key("fsdp_config"), acc);
  } else if (l.distributed_type == "FSDP") {
    parse_fsdp(json::object(), top.key("fsdp_config"), acc);
  }
  if (acc.mixed_precision.is_set() && acc.mixed_precision.value != Precision::F32)
    acc.ds_keys_in_yaml.push_back("mixed_precision");
  return acc;
}

AccelerateConfig load_accelerate_config(const std::string& path) {
  return parse_accelerate_config(load_document(path), path);
}

void check_no_ds_duplication(const AccelerateConfig& acc, const std::string& json_path) {
  if (acc.ds_keys_in_yaml.empty()) return;
  std::string keys;
  for (const auto& k : acc.ds_keys_in_yaml) keys += (keys.empty() ? "" : ", ") + k;
  ZT_THROW_INPUT(acc.source, ": sets DeepSpeed settings (", keys, ") while the DeepSpeed config file ", json_path,
                 " is used; Accelerate refuses this ambiguity too: move them into ", json_path,
                 " and delete them from the YAML");
}

}  // namespace zt::config
