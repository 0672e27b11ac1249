// What the ZeRO engine is asked to do: the engine-facing part of ds_config's
// zero_optimization. Its own header (no engine, model or comm includes) so that
// config/config.h can hold it directly: TrainConfig's ZeroSection *is* a ZeroOptions, and
// the engine takes the config's struct instead of a field-by-field copy.
#pragma once
#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace zt::zero {

enum class OverlapComm { Off, On };

// Where stage 3 keeps each rank's 16-bit parameter partitions: device memory, or host
// memory (DeepSpeed's offload_param {device: cpu}), page-locked unless pin_memory is false.
// On the host, each unit's slice is copied to the device on its own stream ahead of use
// (with the stage-3 prefetch) and the gathered unit is released after, as usual.
enum class ParamHome { Device, PinnedHost, PageableHost };

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
};

}  // namespace zt::zero
