// What one rank owns of a flat unit: a contiguous slice [begin, begin + numel) of the
// unit's flat buffer. With ZeRO stages 1-3 each rank updates only its slice; stage 0 (and
// a single process) owns the whole unit. The optimizer walks the parameters that overlap
// the slice, so weight decay still follows each parameter.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/tensor.h"
#include "model/registry.h"

namespace zt::zero {

class ParamStore;

struct UnitPartition {
  int64_t begin = 0;  // first element of the unit's flat buffer this rank owns
  Tensor params;      // [numel] this rank's slice of the parameters (param dtype)
  Tensor grads;       // [numel] the reduced gradient of that slice (any float dtype)
  // Where the optimizer keeps this slice's state (f32 master, moments): the parameters'
  // device; ZeRO-Offload (zero/offload_optimizer.h) hands its host optimizer partitions
  // over host staging instead.
  Device state_device = Device::cpu();
  // Stage 3 with offload_param: the engine's store that holds `params` (zero/param_store.h).
  // Acquire the slice there around every use: a swapped slice's `params` has its shape and
  // dtype but no data.
  ParamStore* param_store = nullptr;
  size_t param_key = 0;  // the slice's key in param_store (the unit's index)
  int64_t numel() const { return params.numel(); }
};

// Called at every optimizer step (the engine's buffers may move between steps); the
// slice bounds must not change after the optimizer is built.
using PartitionFn = std::function<UnitPartition(size_t unit_index)>;

// Nothing to update: a frozen unit's partition (no optimizer state is kept for it).
inline UnitPartition empty_partition(const model::Unit& u) {
  return {0, Tensor(nullptr, {0}, u.param_dtype(), u.device()), Tensor(), u.device()};
}

// The whole unit: the single-process / stage-0 partition (empty when frozen).
inline UnitPartition whole_unit(model::Unit& u) {
  if (u.frozen()) return empty_partition(u);
  return {0, u.flat_params(), u.flat_grads(), u.device()};
}

// The overlap of a parameter [offset, offset + n) with [begin, begin + len), as local
// offsets into the slice; empty (length 0) when they do not overlap.
struct LocalRange {
  int64_t start = 0, length = 0;
};
inline LocalRange overlap(int64_t offset, int64_t n, int64_t begin, int64_t len) {
  const int64_t lo = std::max(offset, begin), hi = std::min(offset + n, begin + len);
  if (hi <= lo) return {};
  return {lo - begin, hi - lo};
}

}  // namespace zt::zero
