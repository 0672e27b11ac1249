#include "config/inert_keys.h"

#include <algorithm>

#include "core/error.h"
#include "config/config_keys.h"

namespace zt::config {

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
  const bool one = world_size == 1;
  const bool gpu = c.device == "cuda";
  const std::string pre = "zero_optimization.";

  // Parameter offload (cpu, or nvme: ZeRO-Infinity) runs only with the optimizer's
  // (offloads_params): the host step updates the offloaded partitions in place. On the GPU
  // an offload that does not happen is a memory promise broken: say it loudly. On the CPU
  // device host memory is where the parameters are anyway. (offload_optimizer cpu and nvme
  // always run: zero/offload_optimizer.h, zero/state_store.h.)
  if (z.offload_param.device != OffloadDevice::None) {
    const std::string key = pre + "offload_param.device " + offload_name(z.offload_param.device);
    const std::string needs =
        "takes effect only at stage 3 together with offload_optimizer {device: cpu or nvme} at ratio 1 (the host "
        "optimizer updates the offloaded parameters)";
    if (gpu && !offloads_params(z)) {
      w.push_back(str("!!! ", key, " on --device cuda ", needs,
                      "; here the parameters stay in GPU memory and no memory is saved (add "
                      "offload_optimizer cpu, or remove offload_param to silence this)"));
    } else if (!gpu && z.offload_param.device == OffloadDevice::CPU) {
      warn(key, "on --device cpu the parameters already live in host memory");
    } else if (!gpu && !offloads_params(z)) {
      warn(key, "it " + needs + "; the parameters stay in host memory");
    }
  }
  const bool nvme = z.offload_optimizer.device == OffloadDevice::NVMe || z.offload_param.device == OffloadDevice::NVMe;
  const bool aio_set = std::any_of(aio_keys().begin(), aio_keys().end(), [&](const AioKey& k) {
    return k.status != KeyStatus::Refused && key_value(k, c.aio) != k.default_value;
  });
  if (aio_set && !nvme) warn("aio", "it tunes NVMe offload, which this run does not use");

  // ZeRO over one process: nothing to shard, nothing to communicate.
  if (one && z.stage > 0 && !offloads_params(z))
    warn(pre + "stage " + std::to_string(z.stage),
         "one process: every partition is the whole model, so it runs as stage 0 (the same results; no "
         "memory to save)");
  if (one && !c.communication_data_type.empty())
    warn("communication_data_type", "one process reduces nothing, so its gradients are not rounded to it");
  // Every other zero_optimization key: its table row says when it changes nothing.
  for (const ZeroKey& k : zero_keys()) {
    const double v = key_value(k, z);
    const bool differs = v != k.default_value;
    bool inert = false;
    switch (k.inert_when) {
      case InertWhen::Never:
        break;
      case InertWhen::NotDefault:
        inert = differs;
        break;
      case InertWhen::NotDefaultBelowStage3:
        inert = differs && z.stage < 3;
        break;
      case InertWhen::NotDefaultOneProcess:
        inert = differs && one;
        break;
      case InertWhen::WrittenTrueOneProcess:
        inert = one && v != 0 && written(c, pre + k.key);
        break;
      case InertWhen::NotDefaultWithoutNvme:
        inert = differs && z.offload_optimizer.device != OffloadDevice::NVMe;
        break;
    }
    // A boolean switched off from its default is named with its value ("reduce_scatter false").
    if (inert) warn(pre + k.key + (k.type == KeyType::Bool && v == 0 ? " false" : ""), k.inert_why);
  }
  if (z.zero3_init && z.stage < 3)
    warn("zero3_init_flag (zero3_init)", "parameters are built partitioned only in stage 3");
  // Top level and precision.
  if (c.prescale_gradients) warn("prescale_gradients", "gradients are averaged by scaling the loss by 1/world size");
  if (c.gradient_predivide_factor != 1.0)
    warn("gradient_predivide_factor", "gradients are averaged by scaling the loss by 1/world size");
  if (!c.grad_accum_dtype.empty())
    warn("data_types.grad_accum_dtype", "gradients accumulate in their own dtype (f32 partitions in stages 2-3)");
  if (c.dataloader_drop_last) warn("dataloader_drop_last", "every batch is full: the loader wraps around epochs");
  // fp16's keys act only in an fp16 run; bf16's accepted ones warn whenever set.
  if (c.precision == Precision::F16)
    for (const Fp16Key& k : fp16_keys())
      if (k.inert_when == InertWhen::NotDefault && key_value(k, c.fp16) != k.default_value)
        warn("fp16." + k.key, k.inert_why);
  for (const Bf16Key& k : bf16_keys())
    if (k.inert_when == InertWhen::NotDefault && key_value(k, c.bf16) != k.default_value)
      warn("bf16." + k.key, k.inert_why);
  if (c.precision != Precision::BF16 && !c.bf16.check_grad_overflow)
    warn("bf16.check_grad_overflow false", "this run is not bf16");

  // activation_checkpointing options: the block turns recomputation of every block on.
  for (const CheckpointingKey& k : checkpointing_keys())
    if (k.inert_when == InertWhen::NotDefault && key_value(k, c.activation_checkpointing) != k.default_value)
      warn("activation_checkpointing." + k.key, k.inert_why);
  return w;
}

}  // namespace zt::config
