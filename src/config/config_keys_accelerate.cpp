// The Accelerate YAML's keys (Accelerate 1.15's ClusterConfig and its DeepSpeed plugin):
// one row each. accelerate_config.cpp reads the values; the known-key checks, which
// plugin keys are DeepSpeed settings (the JSON + YAML rule) and docs/configs.md's two
// tables come from here.
#include "config/config_keys.h"

namespace zt::config {

namespace {

AccelerateKey top(std::string key, std::string dflt, std::string doc) {
  return {std::move(key), std::move(dflt), "", false, std::move(doc)};
}

std::vector<AccelerateKey> make_top() {
  const std::string platform = "accepted, no effect (launcher and platform details)";
  const std::string inert = "accepted, no effect; true warns";
  std::vector<AccelerateKey> t = {
      top("compute_environment", "LOCAL_MACHINE", "resolved; `AMAZON_SAGEMAKER` refused"),
      top("distributed_type", "NO",
          "resolved: NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP; XLA/TPU, MEGATRON_LM, MULTI_NPU/MLU/XPU/HPU/... "
          "refused"),
      top("mixed_precision", "no", "resolved: no \\| fp16 \\| bf16 (unquoted `no` too); fp8 refused"),
      top("use_cpu", "false", "resolved (device cpu)"),
      top("num_processes", "—",
          "resolved: total over all machines (`zerotrain launch --config_file` starts them); a running job of "
          "another size warns, a process started alone exits 2"),
      top("num_machines", "1", "resolved; must divide num_processes"),
      top("machine_rank", "0", "resolved (0..num_machines-1)"),
      top("gpu_ids", "all", "resolved by `zerotrain launch`: every node's CUDA_VISIBLE_DEVICES"),
      top("main_process_ip", "—", "resolved"),
      top("main_process_port", "29500", "resolved"),
      top("rdzv_backend", "—", platform),
      top("same_network", "—", platform),
      top("main_training_function", "—", platform),
      top("downcast_bf16", "false", inert),
      top("debug", "false", inert),
      top("enable_cpu_affinity", "false", inert),
      top("dynamo_config", "—", "accepted; a note when a backend is set (no effect)"),
      top("deepspeed_config", "—", "with `distributed_type: DEEPSPEED`: the table below"),
      top("fsdp_config", "—", "with `distributed_type: FSDP`: mapped onto ZeRO (below)"),
  };
  for (const char* key :
       {"megatron_lm_config", "ipex_config", "mpirun_config", "fp8_config", "tpu_name", "tpu_zone", "tpu_use_cluster",
        "tpu_use_sudo", "tpu_env", "commands", "command_file", "tpu_vm", "parallelism_config"})
    t.push_back(top(key, "—", platform));
  // What users write although it is DeepSpeed's schema.
  for (const char* key : {"fp16", "bf16"}) {
    AccelerateKey k = top(key, "—", "DeepSpeed's block written here by users: mapped to the ds_config's");
    k.maps_to = key;
    k.ds_setting = true;
    t.push_back(k);
  }
  return t;
}

AccelerateKey plugin(std::string key, std::string maps_to, bool ds_setting, std::string doc) {
  return {std::move(key), "", std::move(maps_to), ds_setting, std::move(doc)};
}

std::vector<AccelerateKey> make_deepspeed() {
  return {
      plugin("deepspeed_config_file", "the ds_config file", false, "resolved"),
      plugin("zero_stage", "`zero_optimization.stage` (Accelerate's default 2)", true, "resolved"),
      plugin("offload_optimizer_device", "`zero_optimization.offload_optimizer.device`", true, "resolved"),
      plugin("offload_param_device", "`zero_optimization.offload_param.device`", true, "resolved"),
      plugin("offload_optimizer_nvme_path", "`zero_optimization.offload_optimizer.nvme_path`", true, "resolved"),
      plugin("offload_param_nvme_path", "`zero_optimization.offload_param.nvme_path`", true, "resolved"),
      plugin("gradient_accumulation_steps", "`gradient_accumulation_steps` (else \"auto\")", true, "resolved"),
      plugin("gradient_clipping", "`gradient_clipping`", true, "resolved"),
      plugin("zero3_init_flag", "`TrainConfig::zero.zero3_init` (build stage-3 params partitioned)", false,
             "resolved (stage 3 always builds partitioned; true below stage 3 warns)"),
      plugin("zero3_save_16bit_model", "`stage3_gather_16bit_weights_on_model_save`", true, "resolved"),
      plugin("deepspeed_hostfile", "launch settings", false, "resolved"),
      plugin("deepspeed_multinode_launcher", "launch settings", false,
             "resolved: pdsh, standard, openmpi, mvapich, mpich, nossh, slurm"),
      plugin("deepspeed_inclusion_filter", "launch settings", false,
             "resolved by `zerotrain launch`: DeepSpeed's --include"),
      plugin("deepspeed_exclusion_filter", "launch settings", false,
             "resolved by `zerotrain launch`: DeepSpeed's --exclude"),
      plugin("deepspeed_moe_layer_cls_names", "", false, "accepted"),
  };
}

}  // namespace

const std::vector<AccelerateKey>& accelerate_keys() {
  static const std::vector<AccelerateKey> table = make_top();
  return table;
}

const std::vector<AccelerateKey>& accelerate_deepspeed_keys() {
  static const std::vector<AccelerateKey> table = make_deepspeed();
  return table;
}

std::vector<std::string> accelerate_key_names(const std::vector<AccelerateKey>& keys) {
  std::vector<std::string> names;
  for (const AccelerateKey& k : keys) names.push_back(k.key);
  return names;
}

}  // namespace zt::config
