// The ZeRO engine: data parallelism over communicator groups with DeepSpeed's stages 0-3.
//
// Each unit has its group (EngineGroups: dense units the mesh's data-parallel group,
// experts their expert-data-parallel group); the unit's flat buffer splits into that
// group's size of equal slices (units are padded to a multiple of it); the group's rank r
// owns slice r: elements [r*P, (r+1)*P). With one communicator for everything (the
// plain constructor) every group is the world, as before the mesh.
//
//   stage 0  full parameters, full gradients, full optimizer state. Gradients are
//            all-reduced in buckets (reduce_bucket_size) as each unit's backward ends,
//            in the last micro-batch of the accumulation.
//   stage 1  optimizer state (f32 master, moments) only for the owned slice. At the
//            accumulation boundary each unit's gradients are reduce-scattered; the owner
//            updates its slice; the updated slices are all-gathered after the step.
//   stage 2  also gradients partitioned: every micro-batch, each unit's gradients are
//            reduce-scattered as soon as its backward ends and added to the owner's f32
//            gradient partition; the unit's full gradient buffer is freed right after.
//   stage 3  also parameters partitioned: a unit's full parameters exist only between
//            the gather before its forward/backward and the release after (the next
//            units are prefetched within stage3_prefetch_bucket_size and
//            stage3_max_live_parameters); units smaller than the persistence threshold
//            stay gathered. With ParamHome::*Host (offload_param) the owned slices live
//            in a ParamStore (zero/param_store.h): one exact-size host allocation, and
//            with offload_param nvme a swap file for the units past max_in_cpu. A gather
//            first acquires the slice and copies it to the device on its own copy stream
//            (one rank: straight into the unit's buffer), so the copy of the next units
//            overlaps this unit's compute; the store's buffer is reused only after the
//            copy is done. The stage-3 prefetch also starts the swapped slices' reads.
//
// The engine is the model's UnitHooks (model/unit_scope.h): the transformer calls it
// before and after each unit's forward and backward, which is where it gathers, releases
// and reduces. With overlap_comm the collectives run while the next unit computes (they
// are started asynchronously and completed at the end of the micro-batch); without, each
// completes before the next unit runs.
//
// How a unit's gradients are reduced is a strategy (zero/grad_reduction.h): the sum,
// the sum in communication_data_type, or an optimizer that exchanges them itself.
// Gradient averaging is the caller's: the trainer scales the loss by 1/world_size, so
// every reduction here is a plain sum.
//
// The global gradient norm counts every parameter once over the whole mesh: each rank's
// square sum covers the slices it owns (stage 0: a unit on its group's rank 0 only, as
// every member holds the same sum), a tensor-parallel-replicated parameter (TpSplit::None)
// on tensor rank 0 only, and the sum runs over the norm group (every rank). When every
// unit's group is the norm group and no rank is a tensor rank > 0 (data parallelism
// alone) this is exactly the norm of before the mesh, in the same order.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "comm/communicator.h"
#include "comm/mesh.h"
#include "model/registry.h"
#include "model/transformer.h"
#include "backend/cuda_api.h"
#include "zero/grad_reduction.h"
#include "zero/offload_hooks.h"
#include "zero/optimizer.h"
#include "zero/options.h"
#include "zero/param_store.h"
#include "zero/partition.h"

namespace zt::zero {

// Bytes this rank moved through collectives, counted as the ring algorithms move them:
// all_reduce 2(N-1)/N x buffer, reduce_scatter and all_gather (N-1)/N x the full buffer.
// wait_seconds: host time this rank spent blocked waiting for them to complete (what
// wall_clock_breakdown reports as communication; overlapped transfers cost nothing here).
struct CommVolume {
  double all_reduce = 0, reduce_scatter = 0, all_gather = 0;
  int64_t calls = 0;
  double wait_seconds = 0;
  double total() const { return all_reduce + reduce_scatter + all_gather; }
};

// Model-state bytes held by this rank.
struct ModelStateBytes {
  int64_t params = 0;        // persistent parameter storage (stage 3: slices + persistent units)
  int64_t grads = 0;         // persistent gradient storage (stages 2-3: the f32 partitions)
  int64_t optimizer = 0;     // master weights and moments of the owned slices
  int64_t buffers_peak = 0;  // transient: gathered units, a unit's full gradients, comm scratch
  int64_t model_states() const { return params + grads + optimizer; }
};

// This rank's slice of a unit's parameters for a checkpoint: elements [begin, begin +
// data.numel()) of the unit's flat buffer. With `io` (parameters swapped to NVMe) `data`
// has the shape and dtype only and `io` moves the elements.
struct ParamSlice {
  Tensor data;
  int64_t begin = 0;
  std::shared_ptr<SliceIo> io{};
};

// The ZeRO paper's per-rank model-state bytes for `numel` parameters: 16-bit (or f32)
// parameters and gradients of param_bytes/grad_bytes each, optimizer_bytes per parameter
// (12 for Adam with an f32 master: master + two moments), divided as each stage divides.
// grad_partition_bytes: bytes per element of the gradient partition in stages 2-3.
int64_t zero_formula_bytes(int stage, int64_t numel, int world_size, int param_bytes, int grad_bytes,
                           int grad_partition_bytes, int optimizer_bytes);

// The ranks one unit's gradients are reduced over and its states partitioned over.
struct UnitGroup {
  comm::Group group;  // buffers move over group.buffers(); host scalars never do
  // This rank's index in the unit's tensor-parallel group (dense units: tp, experts: the
  // expert tensor group): the global norm counts a TP-replicated parameter on index 0 only.
  int tp_rank = 0;
};

struct EngineGroups {
  std::vector<UnitGroup> units;  // one per registry unit, in registry order
  // Every rank of the job: the overflow agreement and the global norm's sum (host).
  comm::Group norm;
};

// Every unit over the mesh's data-parallel group (the dense units' group; experts will
// take mesh.expert_data_parallel() and the expert tensor rank), the norm over the world.
EngineGroups dense_unit_groups(const comm::Mesh& mesh, const model::ParameterRegistry& registry);

class ZeroEngine final : public model::UnitHooks {
 public:
  // comm moves the model's buffers (MPI for host memory, NCCL for GPU memory); scalar_comm
  // (default: comm) agrees on host scalars — overflow flags, norms — which the NCCL
  // communicator cannot take. Every unit's group is this world.
  ZeroEngine(model::ParameterRegistry& registry, comm::Communicator& comm, ZeroOptions options,
             comm::Communicator* scalar_comm = nullptr);
  // A group per unit (the groups' communicators must outlive the engine).
  ZeroEngine(model::ParameterRegistry& registry, EngineGroups groups, ZeroOptions options);
  ~ZeroEngine() override;
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  int stage() const { return options_.stage; }
  // This rank and the number of ranks in the norm group (every rank of the job).
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  const ZeroOptions& options() const { return options_; }
  // A unit's group (partition slices follow its size and rank).
  const comm::Group& unit_group(size_t unit) const { return units_[unit].group; }

  // The gradient-reduction strategy (default: make_sum_reduction(communication_dtype)).
  // Set it before the first micro-batch; BadInput when it cannot run at this stage.
  void set_gradient_reduction(std::unique_ptr<GradReduction> reduction);
  const GradReduction& gradient_reduction() const { return *reduction_; }

  // Call once the full weights are in place (initialised or loaded; identical on every
  // rank) and before the optimizer is built. Stage 3 keeps this rank's slice of each unit
  // and frees the full buffers (persistent units stay); stages 2-3 free the full gradient
  // buffers (they exist only while a unit's backward runs).
  void shard_model();
  // Stage 3 without ever holding the whole model: for each unit in turn,
  // `fill_slice(unit, begin, out)` writes elements [begin, begin + out.numel()) of its
  // parameters (reading them from files, or building the unit to cut them:
  // Transformer::init_unit_slice); a full unit left in place is freed unless persistent.
  void shard_model_from_slices(const std::function<void(model::Unit&, int64_t, const Tensor&)>& fill_slice);

  // The slice each rank's optimizer updates (stage 0: the whole unit): its group's
  // rank's slice.
  UnitPartition partition(size_t unit);
  PartitionFn partition_fn() {
    return [this](size_t u) { return partition(u); };
  }
  // This rank's slice [begin, begin + P) of a unit's parameters (for checkpoints), with
  // begin = rank * P; stage 3: the partition buffer itself, or its store's slice I/O.
  ParamSlice param_slice(size_t unit);
  int64_t slice_begin(size_t unit) const;
  // Where a checkpoint's parameters load into: the full buffer (begin 0) in stages 0-2,
  // the slice in stage 3 (then call refresh_after_load()).
  ParamSlice param_load_target(size_t unit);
  void refresh_after_load();
  // Stage 3 with offload_param: where the slices live (null otherwise).
  const ParamStore* param_store() const { return params_.get(); }

  // The accumulation of one optimizer step:
  //   zero_grads(); for each micro-batch { begin_micro_batch(last); forward_backward; end_micro_batch(); }
  // `last` marks the micro-batch after which stage 0/1 reduce.
  void zero_grads();
  void begin_micro_batch(bool last);
  void end_micro_batch();
  // Releases what stage 3 keeps gathered after a forward (call after evaluation).
  void flush();

  // At the boundary, agreed by every rank: no inf/nan in any gradient, and the global norm.
  // Each is one pass over this rank's gradients with a single host synchronisation (a sum
  // of squares accumulated on the device, which is non-finite exactly when some element
  // is), then one scalar collective.
  bool grads_finite();
  double grad_norm();
  // After the optimizer updated the owned slices: stages 1-2 all-gather them into every
  // rank's full parameters (with offload, each unit's gather waits for its next use, as
  // the host is still stepping); stage 3 refreshes the persistent units.
  void after_optimizer_step();

  // The offload seam (zero/offload_hooks.h): null removes it. The hooks must outlive the
  // engine's use of them.
  void set_offload(OffloadHooks* hooks) { offload_ = hooks; }

  // Every unit's full parameters in place (saving a full model, sampling): stage 3 gathers
  // them, and updates still in flight (offload) land first. release_full_model() returns
  // stage 3 to the sharded state (a no-op in stages 0-2).
  void gather_full_model();
  // The trainable units' full parameters only (a LoRA run's adapters, which its final/
  // holds: no frozen base unit is gathered); release_full_model() releases them.
  void gather_trainable_units();
  void release_full_model();

  ModelStateBytes memory(int64_t optimizer_state_bytes) const;
  const CommVolume& comm_volume() const { return volume_; }
  void reset_comm_volume() { volume_ = CommVolume(); }

  // model::UnitHooks
  void before_forward(model::Unit& unit) override;
  void after_forward(model::Unit& unit) override;
  void before_backward(model::Unit& unit) override;
  void after_backward(model::Unit& unit) override;

 private:
  enum class Gathered { No, InFlight, Yes };
  struct UnitState {
    comm::Group group;        // the unit's ranks (UnitGroup::group)
    int rank = 0, size = 1;   // this rank's index in it, and its size
    int tp_rank = 0;          // UnitGroup::tp_rank
    int64_t slice = 0;        // P: elements per rank of the group
    bool persistent = false;  // stage 3: never released
    OwnedTensor param_owned;  // stage 3 on the device: param_part's storage
    Tensor param_part;        // stage 3 on the device: the owned slice (offload_param: in params_)
    OwnedTensor fetch_buffer;  // param offload, several ranks: the slice on the device, for the gather
    std::optional<cuda::CopyEvent> fetched;  // param offload on the GPU: its host-to-device copy
    OwnedTensor grad_part;    // stages 2-3: f32 gradient accumulator of the owned slice
    Gathered gathered = Gathered::Yes;
    comm::WorkPtr gather_work;
    bool release_pending = false;  // stage 3: release at the next other unit's hook
    bool gather_pending = false;   // stages 1-2 with offload: the updated slices not yet all-gathered
  };
  // One unit's gradient reduction in flight (one or more bucket collectives).
  struct Reduction {
    size_t unit = 0;
    ReductionWork work;  // the strategy's collectives and buffers
  };

  size_t index_of(const model::Unit& unit) const;
  // Stages 2-3: the unit's f32 gradient slice replaces its full gradient buffer.
  void partition_gradients(size_t unit);
  void poll();
  // What the strategy is asked for a unit's reduction.
  ReductionRequest reduction_request(size_t unit);
  void start_reduction(size_t unit);
  void finish_reduction(Reduction& r);
  void finish_all_reductions();
  // Sum of squares of this rank's (reduced) gradient partitions, after the reductions.
  double local_sum_of_squares();
  // Whether every unit's group is the norm group and no rank is a tensor rank > 0: the
  // norm is then summed as before the mesh (stage 0 needs no collective at all).
  bool data_parallel_only() const;
  // The mesh form: this rank's share of the global square sum, each parameter counted once.
  double counted_sum_of_squares();
  void start_gather(size_t unit);
  // Stages 1-2 with offload: the all-gather after_optimizer_step left to the unit's next
  // use (collective: every rank uses the units in the same order).
  void gather_updated(size_t unit);
  // Starts the collection of a unit's full parameters into `full` from every rank's slice:
  // an all-gather of the slices, with param offload after the slice's copy to the device
  // (one rank: the copy alone, into `full`). Returns the collective in flight (null when
  // there is none: then s.fetched alone says when the copy is done).
  comm::WorkPtr gather_into(size_t unit, const Tensor& full);
  // Waits for gather_into's work (the compute stream waits for the copy, not the host).
  void finish_gather(size_t unit);
  void allocate_host_params();
  bool params_on_host() const { return options_.stage >= 3 && options_.param_home != ParamHome::Device; }
  void ensure_gathered(size_t unit);
  void release_unit(size_t unit);
  void release_pending_except(size_t keep);
  void prefetch(size_t from, int direction);
  // offload_param nvme: the reads of the next swapped slices, started ahead of their gathers.
  void prefetch_swapped(size_t from, int direction);
  int64_t gathered_live_elements() const;
  void add_transient(int64_t bytes);
  void count(double bytes, double* bucket);
  // w->wait(), its blocked time added to volume_.wait_seconds.
  void wait_for(comm::Work& w);

  model::ParameterRegistry& registry_;
  comm::Group norm_;  // every rank: agreements, the norm's sum
  ZeroOptions options_;
  std::unique_ptr<GradReduction> reduction_;
  int rank_ = 0, world_ = 1;
  std::vector<UnitState> units_;
  std::unordered_map<const model::Unit*, size_t> index_;
  std::deque<Reduction> reductions_;
  bool reduce_this_micro_batch_ = true;
  bool last_micro_batch_ = true;  // its reductions make each unit's gradient final
  OffloadHooks* offload_ = nullptr;
  // Param offload: every unit's owned slice. Before the copy stream, so that the copies
  // reading its buffers are done (the stream's destructor waits) before it goes.
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<cuda::CopyStream> fetch_stream_;  // param offload on the GPU: slices to the device
  bool sharded_ = false;
  CommVolume volume_;
  int64_t transient_bytes_ = 0, transient_peak_ = 0;
};

}  // namespace zt::zero
