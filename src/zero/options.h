// What the ZeRO engine is asked to do: the engine-facing part of ds_config's
// zero_optimization. Its own header (no engine, model or comm includes) so that
// config/config.h can hold it directly: TrainConfig's ZeroSection *is* a ZeroOptions, and
// the engine takes the config's struct instead of a field-by-field copy.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "io/async_io.h"

namespace zt::zero {

enum class OverlapComm { Off, On };

// DeepSpeed's offload devices (zero_optimization.offload_optimizer / offload_param "device").
enum class OffloadDevice { None, CPU, NVMe };

// DeepSpeed's zero_optimization.offload_optimizer, typed once: ds_config_zero.cpp reads the
// dict into it, TrainConfig's ZeroSection holds it, and the run's offloaded optimizer takes
// it (NvmeStoreOptions *is* one), with no field-by-field copy on the way.
struct OffloadOptimizerOptions {
  OffloadDevice device = OffloadDevice::None;
  std::string nvme_path;   // the folder of the swap files (device nvme)
  int buffer_count = 4;    // pieces in memory at once (>= 2 to overlap anything)
  bool pin_memory = true;  // page-locked host state
  bool pipeline_read = false, pipeline_write = false;
  bool fast_init = false;  // accepted (no effect here)
  double ratio = 1.0;      // the share of the state (in elements) on the host
};

// DeepSpeed's zero_optimization.offload_param, typed once likewise (ParamNvme *is* one).
struct OffloadParamOptions {
  OffloadDevice device = OffloadDevice::None;
  std::string nvme_path;
  int buffer_count = 5;
  // Elements per swap buffer in DeepSpeed; here a buffer holds one unit's slice, so it is
  // sized to the largest swapped slice (a buffer_size below that warns).
  int64_t buffer_size = 100'000'000;
  int64_t max_in_cpu = 1'000'000'000;  // elements kept in host memory
  bool pin_memory = true;
};

// Where stage 3 keeps each rank's 16-bit parameter partitions: device memory, or host
// memory (DeepSpeed's offload_param {device: cpu}), page-locked unless pin_memory is false.
// On the host, each unit's slice is copied to the device on its own stream ahead of use
// (with the stage-3 prefetch) and the gathered unit is released after, as usual.
enum class ParamHome { Device, PinnedHost, PageableHost };

// DeepSpeed's offload_param {device: nvme} (ZeRO-Infinity), with a *Host ParamHome: the
// first units in forward order stay in host memory up to max_in_cpu elements, the rest
// live in a swap file under nvme_path, read into buffer_count buffers when gathered and
// written back after the host step updates them (zero/param_store.h).
struct ParamNvme : OffloadParamOptions {
  io::AioOptions aio;
};

struct ZeroOptions {
  int stage = 0;
  OverlapComm overlap_comm = OverlapComm::Off;
  int64_t reduce_bucket_size = 500'000'000;          // elements per gradient collective
  int64_t stage3_prefetch_bucket_size = 50'000'000;  // elements gathered ahead of use
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int64_t stage3_param_persistence_threshold = 100'000;  // units with fewer elements stay gathered
  // DeepSpeed's communication_data_type: the dtype gradients are reduced in. Empty: the
  // gradients' own dtype. Another dtype: each bucket is converted before its collective
  // (rounded once) and the result converted back (stage 0/1) or added into the f32
  // partition (stages 2-3), so 16-bit reductions of f32 gradients move half the bytes.
  std::optional<DType> communication_dtype;
  ParamHome param_home = ParamHome::Device;  // stage 3 only
  std::optional<ParamNvme> param_nvme;       // with a *Host param_home: the swapped part
};

}  // namespace zt::zero
