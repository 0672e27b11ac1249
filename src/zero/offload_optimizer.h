// ZeRO-Offload (DeepSpeed's offload_optimizer {device: cpu}): the f32 master weights and
// the optimizer's moments of this rank's partitions live in host memory and the update
// runs on the host, so the GPU holds only the 16-bit parameters and gradients.
//
// A step, on the GPU:
//   backward   each unit's gradient partition is copied to pinned host memory on a copy
//              stream as soon as it is final (the engine's gradient_ready), overlapping
//              the rest of the backward;
//   step()     after the boundary's overflow check and norm, the host worker thread
//              updates the units in forward order (the host optimizer: vectorised,
//              OpenMP; the 16-bit parameter written in the same pass) and copies each
//              unit's new parameters back on a second copy stream; step() returns at once;
//   forward    before a unit is used, the caller's thread waits until the worker has
//              updated that unit and orders the compute stream after its copy (no host
//              wait for the copy itself), so the next forward runs while later units
//              are still being updated.
// `ratio` (DeepSpeed's ZeRO-Offload++): the fraction of the optimizer state (by elements)
// updated on the host; the first units in forward order, (1 - ratio) of the elements,
// keep their state on the GPU and step there, before the host's first unit is needed.
//
// With offload_param (stage 3) the engine's 16-bit partitions already live in its
// ParamStore (host memory, or with offload_param nvme partly a swap file): the host step
// acquires each unit's slice there (for Overwrite when the f32 master rewrites all of it),
// updates it in place and releases it Modified, so its write-back to the drive overlaps
// the next units; the engine copies each slice to the device when it gathers the unit
// (zero/engine.h), after before_params_used says the unit's update is done. Only the
// gradients are staged.
//
// On --device cpu the same path runs with host staging (the copies are memcpy), so the
// multi-rank logic is tested without a GPU. The checkpoint state is the same named
// tensors as without offload ("<unit>.master", "<unit>.exp_avg", ...): a run resumes with
// or without offload, at any world size.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda_api.h"
#include "model/registry.h"
#include "zero/host_buffer.h"
#include "zero/host_worker.h"
#include "zero/offload_hooks.h"
#include "zero/optimizer.h"
#include "zero/optimizer_base.h"
#include "zero/partition.h"
#include "zero/state_store.h"

namespace zt::zero {

struct OffloadOptions {
  double ratio = 1.0;                // fraction of the elements whose state lives on the host, (0, 1]
  Pinning pinning = Pinning::Pinned;  // staging buffers page-locked (GPU runs only)
  // offload_optimizer {device: nvme}: the host units' state is swapped to this drive
  // (zero/state_store.h) and only buffer_count units of it are in memory at a time.
  std::optional<NvmeStoreOptions> nvme;
};

// What the offload holds, for the log and the memory report.
struct OffloadLayout {
  size_t host_units = 0, units = 0;
  int64_t host_elements = 0, elements = 0;
  int64_t host_state_bytes = 0;    // master + moments in host memory
  int64_t device_state_bytes = 0;  // the units stepped on the device (ratio < 1)
  int64_t staging_bytes = 0;       // gradient and parameter staging buffers
  bool pinned = false;
  bool params_in_place = false;    // offload_param: the host step writes the engine's parameter store
  std::string swap_file;           // NVMe: the host state's swap file ("" in memory)
  int64_t swap_buffer_bytes = 0;   // NVMe: the memory of its buffers
};

class OffloadedOptimizer final : public Optimizer, public OffloadHooks {
 public:
  // partitions: the engine's (this rank's slice of each unit). Builds the host state from
  // the current parameters (a copy to the host).
  OffloadedOptimizer(model::ParameterRegistry& registry, const OptimizerSpec& spec, PartitionFn partitions,
                     OffloadOptions options);
  ~OffloadedOptimizer() override;  // waits for the host step and the copies in flight

  // Optimizer
  void step(float lr, float grad_scale) override;
  int64_t steps_taken() const override { return host_->steps_taken(); }
  std::vector<std::pair<std::string, Tensor>> state_tensors() override;
  std::vector<StateSlice> state_slices() override;
  void set_steps_taken(int64_t steps) override;
  size_t state_bytes() const override;
  const OptimizerSpec& spec() const override { return host_->spec(); }
  void set_betas(float beta1, float beta2) override;
  void init_master_from_params() override;

  // OffloadHooks
  void gradient_ready(size_t unit, const Tensor& grads) override;
  void before_gradients_reset() override;
  void before_params_used(size_t unit) override;
  void params_loaded() override { refresh_host_params(); }

  // Blocks until the last step's host updates and copies are done (errors rethrown).
  void finish_updates();
  const OffloadLayout& layout() const { return layout_; }
  // The NVMe swap of the host state (null in memory): its traffic for the log.
  const NvmeStore* nvme_store() const;

 private:
  // One unit whose state lives on the host: its staging buffers (views into them) and
  // the copies in flight.
  struct HostUnit {
    Tensor grads;   // [P] the gradient partition's dtype
    Tensor params;  // [P] the parameters' dtype
    cuda::CopyEvent grads_copied;   // D2H of the gradients (GPU)
    cuda::CopyEvent params_copied;  // H2D of the updated parameters (GPU)
    bool update_pending = false;    // the worker has not updated it yet (guarded by mutex_)
    bool order_pending = false;     // params_copied not yet ordered before compute
    bool params_in_place = false;   // params lives in the engine's ParamStore (offload_param)
  };
  bool on_host(size_t unit) const { return host_units_[unit].has_value(); }
  // The host's parameter copies from the device (before the first step: weights loaded
  // after construction).
  void refresh_host_params();
  void host_step(float lr, float grad_scale);  // on the worker
  void copy_to_host(const Tensor& host_dst, const Tensor& src);
  void copy_to_device(const Tensor& dst, const Tensor& host_src, cuda::CopyEvent* done);

  model::ParameterRegistry& registry_;
  PartitionFn partitions_;
  bool gpu_ = false;
  std::vector<std::optional<HostUnit>> host_units_;  // indexed by unit; empty: stepped on the device
  std::vector<size_t> host_order_;                   // host units in forward order
  HostBuffer staging_;
  std::unique_ptr<FlatOptimizer> host_;    // over the staging buffers
  std::unique_ptr<FlatOptimizer> device_;  // over the device partitions of the other units
  std::unique_ptr<cuda::CopyStream> to_host_, to_device_;
  OffloadLayout layout_;
  std::mutex mutex_;
  std::condition_variable updated_;
  HostWorker worker_;  // last: destroyed first, so no job outlives the members it uses
};

}  // namespace zt::zero
