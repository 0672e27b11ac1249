// Shared machinery of the flat-unit optimizers: per-unit state buffers (f32, with an f32
// master copy for 16-bit parameters; or, with MasterWeights::None and bf16 parameters, bf16
// state and no master) over the rank's partition of each unit, the
// per-parameter walk with each parameter's weight decay, state naming for checkpoints. A
// concrete optimizer only supplies the update of one unit's partition, cut into one segment
// per parameter (a single segmented update call: one kernel launch per unit on the GPU).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/optimizer_segments.h"
#include "zero/optimizer.h"
#include "zero/partition.h"
#include "zero/state_store.h"

namespace zt::zero {

class FlatOptimizer : public Optimizer {
 public:
  // step() is begin_step() and then step_unit() for every unit in order. Split, the units
  // can be stepped one at a time as their gradients arrive (ZeRO-Offload steps each unit on
  // the host while the next forward runs): begin_step() once per step, then step_unit()
  // exactly once for each unit, in any order, from one thread at a time.
  void step(float lr, float grad_scale) final;
  void begin_step();
  void step_unit(size_t unit, float lr, float grad_scale);
  // The unit step_unit() will see next (NVMe: its state read starts now).
  void prefetch_unit(size_t unit);
  // Every swapped unit's state written back (NVMe); a no-op in memory.
  void flush_state() { store_->flush(); }
  const StateStore& state_store() const { return *store_; }
  // The registry's units this optimizer updates: those whose partition is not empty
  // (an offloaded run splits the units between a host and a device optimizer).
  bool updates_unit(size_t unit) const { return units_[unit].numel > 0; }
  size_t unit_count() const { return units_.size(); }
  int64_t steps_taken() const final { return steps_; }
  void set_steps_taken(int64_t steps) final;
  std::vector<std::pair<std::string, Tensor>> state_tensors() final;
  std::vector<StateSlice> state_slices() final;
  size_t state_bytes() const final;
  const OptimizerSpec& spec() const final { return spec_; }
  void set_betas(float beta1, float beta2) override;
  void init_master_from_params() final { copy_params_to_master(); }
  // The dtype of the state buffers: f32, or the parameters' bf16 without a master.
  DType state_dtype() const { return state_dtype_; }

 protected:
  // state_names: the state buffers each unit needs, zero-initialised (e.g. exp_avg).
  // partitions: the slice of each unit this rank updates (empty: whole units).
  // store: where the state lives between steps (null: memory on the partition's device).
  FlatOptimizer(model::ParameterRegistry& registry, OptimizerSpec spec, std::vector<std::string> state_names,
                PartitionFn partitions, std::unique_ptr<StateStore> store = nullptr);

  // One unit's partition: views of its flat buffers (parameters, master, gradients, state
  // in state_names order) and one segment per parameter overlapping the partition, at its
  // offset in these views, with its weight decay (spec weight_decay, or 0 for
  // WeightDecay::Skip parameters). Alignment gaps between parameters are in no segment.
  struct UnitRange {
    Tensor param, master, grad;
    std::vector<Tensor> state;
    OptimizerSegments segments;
  };
  // Updates every segment of the unit (never called with no segments); steps_taken()
  // already counts this step (1 on the first).
  virtual void update_unit(const UnitRange& unit, float lr, float grad_scale) = 0;

  OptimizerSpec spec_;

 private:
  struct UnitState {
    int64_t begin = 0;    // the partition's first element in the unit
    int64_t numel = 0;    // the partition's length
    bool master = false;  // only for 16-bit parameters with MasterWeights::F32
    size_t first_piece = 0, pieces = 0;  // its pieces in pieces_
  };
  // A unit's state is declared to the store as pieces of at most max_piece_elements()
  // (one piece in memory; sub_group_size ones on NVMe), stepped in turn: the update is
  // elementwise, so a piece at a time gives the whole unit's bits.
  struct Piece {
    size_t unit = 0;
    int64_t offset = 0;  // in the unit's partition
    int64_t numel = 0;
  };
  void copy_params_to_master();

  UnitPartition partition(size_t unit);

  model::ParameterRegistry& registry_;
  PartitionFn partitions_;
  std::vector<std::string> state_names_;
  DType state_dtype_ = DType::F32;
  std::vector<UnitState> units_;
  std::vector<Piece> pieces_;  // the store's keys
  std::unique_ptr<StateStore> store_;
  int64_t steps_ = 0;
};

}  // namespace zt::zero
