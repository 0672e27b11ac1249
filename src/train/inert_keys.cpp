#include "train/inert_keys.h"

#include "core/error.h"

namespace zt::train {

namespace {

const char* offload_name(OffloadDevice d) { return d == OffloadDevice::NVMe ? "nvme" : "cpu"; }

// Whether the config wrote the key (its origin is a file, the command line or "auto").
bool written(const TrainConfig& c, const std::string& key) {
  const auto it = c.origin.find(key);
  return it != c.origin.end() && it->second.rfind("default", 0) != 0;
}

}  // namespace

std::vector<std::string> inert_key_warnings(const TrainConfig& c, int world_size) {
  std::vector<std::string> w;
  const auto warn = [&](const std::string& key, const std::string& why) {
    w.push_back(str(key, ": accepted but has no effect here (", why, ")"));
  };
  const ZeroSection& z = c.zero;
  const ZeroSection d;  // DeepSpeed's defaults
  const bool one = world_size == 1;
  const bool gpu = c.device == "cuda";
  const std::string pre = "zero_optimization.";

  // Offload: not implemented yet. On the GPU that is a memory promise broken: say it loudly.
  for (const auto& [key, dev] : {std::pair<std::string, OffloadDevice>{"offload_optimizer", z.offload_optimizer},
                                 {"offload_param", z.offload_param}}) {
    if (dev == OffloadDevice::None) continue;
    const std::string what = key == "offload_optimizer" ? "optimizer state" : "parameters";
    if (gpu) {
      w.push_back(str("!!! ", pre, key, ".device ", offload_name(dev), " on --device cuda: offload is not implemented "
                      "yet, the ", what, " stay in GPU memory and no memory is saved; a model that needs the offload "
                      "to fit will run out of GPU memory (remove ", key, " to silence this)"));
    } else if (dev == OffloadDevice::CPU) {
      warn(pre + key + ".device cpu", "on --device cpu the " + what + " already live in host memory");
    } else {
      warn(pre + key + ".device nvme", "NVMe offload is not implemented yet: the " + what +
                                           " stay in host memory and no memory is saved");
    }
  }
  const bool nvme = z.offload_optimizer == OffloadDevice::NVMe || z.offload_param == OffloadDevice::NVMe;
  const AioSection a;
  const AioSection& ca = c.aio;
  if (ca.block_size != a.block_size || ca.queue_depth != a.queue_depth ||
      ca.intra_op_parallelism != a.intra_op_parallelism || ca.single_submit != a.single_submit ||
      ca.overlap_events != a.overlap_events)
    warn("aio", nvme ? "NVMe offload is not implemented yet" : "it tunes NVMe offload, which this run does not use");

  // ZeRO over one process: nothing to shard, nothing to communicate.
  if (one && z.stage > 0)
    warn(pre + "stage " + std::to_string(z.stage),
         "one process: every partition is the whole model, so it runs as stage 0 (the same results; no "
         "memory to save)");
  if (one && z.overlap_comm && written(c, pre + "overlap_comm"))
    warn(pre + "overlap_comm", "one process has no communication to overlap");
  if (one && z.reduce_bucket_size != d.reduce_bucket_size)
    warn(pre + "reduce_bucket_size", "one process reduces nothing");
  if (one && !c.communication_data_type.empty())
    warn("communication_data_type", "one process reduces nothing, so its gradients are not rounded to it");
  if (z.stage < 3) {
    if (z.stage3_prefetch_bucket_size != d.stage3_prefetch_bucket_size)
      warn(pre + "stage3_prefetch_bucket_size", "stage 3 only");
    if (z.stage3_max_live_parameters != d.stage3_max_live_parameters)
      warn(pre + "stage3_max_live_parameters", "stage 3 only");
    if (z.stage3_param_persistence_threshold != d.stage3_param_persistence_threshold)
      warn(pre + "stage3_param_persistence_threshold", "stage 3 only");
    if (z.stage3_gather_16bit_weights_on_model_save)
      warn(pre + "stage3_gather_16bit_weights_on_model_save", "below stage 3 every rank holds the full model, "
                                                                "which final/ is always written from");
  }
  if (z.zero3_init && z.stage < 3)
    warn("zero3_init_flag (zero3_init)", "parameters are built partitioned only in stage 3");
  // DeepSpeed's implementation choices that zerotrain's flat units make for it.
  if (!z.contiguous_gradients) warn(pre + "contiguous_gradients false", "gradients are always one flat buffer per unit");
  if (!z.reduce_scatter) warn(pre + "reduce_scatter false", "stages 1-3 always reduce-scatter gradients");
  if (!z.allgather_partitions) warn(pre + "allgather_partitions false", "updated partitions are always all-gathered");
  if (z.allgather_bucket_size != d.allgather_bucket_size)
    warn(pre + "allgather_bucket_size", "parameters are gathered one unit at a time");
  if (z.round_robin_gradients) warn(pre + "round_robin_gradients", "gradient partitions are contiguous slices");
  if (!z.load_from_fp32_weights)
    warn(pre + "load_from_fp32_weights false", "checkpoints always restore the f32 master weights they hold");
  if (z.elastic_checkpoint) warn(pre + "elastic_checkpoint", "checkpoints load at any world size anyway");
  if (z.sub_group_size != d.sub_group_size) warn(pre + "sub_group_size", "the optimizer steps one unit at a time");
  if (!z.ignore_unused_parameters) warn(pre + "ignore_unused_parameters false", "every parameter gets a gradient");
  if (z.stage3_model_persistence_threshold != d.stage3_model_persistence_threshold)
    warn(pre + "stage3_model_persistence_threshold", "persistence is decided per unit");
  if (z.stage3_max_reuse_distance != d.stage3_max_reuse_distance)
    warn(pre + "stage3_max_reuse_distance", "released units are gathered again when next used");

  // Top level and precision.
  if (c.prescale_gradients) warn("prescale_gradients", "gradients are averaged by scaling the loss by 1/world size");
  if (c.gradient_predivide_factor != 1.0)
    warn("gradient_predivide_factor", "gradients are averaged by scaling the loss by 1/world size");
  if (!c.grad_accum_dtype.empty())
    warn("data_types.grad_accum_dtype", "gradients accumulate in their own dtype (f32 partitions in stages 2-3)");
  if (c.dataloader_drop_last) warn("dataloader_drop_last", "every batch is full: the loader wraps around epochs");
  if (c.precision == Precision::F16 && c.fp16_auto_cast) warn("fp16.auto_cast", "the model computes in fp16 throughout");
  if (c.bf16_immediate_grad_update) warn("bf16.immediate_grad_update", "gradients are applied at the boundary");
  if (c.precision != Precision::BF16 && !c.bf16_check_grad_overflow)
    warn("bf16.check_grad_overflow false", "this run is not bf16");

  // activation_checkpointing options: the block turns recomputation of every block on.
  const ActivationCheckpointingSection& ac = c.activation_checkpointing;
  const std::string ak = "activation_checkpointing.";
  if (ac.partition_activations) warn(ak + "partition_activations", "it splits activations over tensor-parallel ranks");
  if (ac.cpu_checkpointing) warn(ak + "cpu_checkpointing", "checkpointed activations stay on the device");
  if (ac.contiguous_memory_optimization)
    warn(ak + "contiguous_memory_optimization", "checkpointed activations already live in one buffer");
  if (ac.number_checkpoints > 0) warn(ak + "number_checkpoints", "every block is a checkpoint");
  if (ac.synchronize_checkpoint_boundary) warn(ak + "synchronize_checkpoint_boundary", "no device sync is needed");
  if (ac.profile) warn(ak + "profile", "use wall_clock_breakdown for the forward/backward times");
  return w;
}

}  // namespace zt::train
