#include "zero/optimizer_base.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "core/error.h"
#include "ops/copy.h"
#include "zero/param_store.h"

namespace zt::zero {

namespace {

// A unit's slice of swapped state over its pieces: element ranges split at the pieces.
class PiecedSliceIo final : public SliceIo {
 public:
  struct Part {
    int64_t offset, numel;
    std::shared_ptr<SliceIo> io;
  };
  std::vector<Part> pieces;
  void read(int64_t offset, const Tensor& dst) override { each(offset, dst, false); }
  void write(int64_t offset, const Tensor& src) override { each(offset, src, true); }

 private:
  void each(int64_t offset, const Tensor& t, bool write) {
    const int64_t end = offset + t.numel();
    for (const Part& p : pieces) {
      const int64_t lo = std::max(offset, p.offset), hi = std::min(end, p.offset + p.numel);
      if (hi <= lo) continue;
      const Tensor part = t.narrow(0, lo - offset, hi - lo);
      if (write)
        p.io->write(lo - p.offset, part);
      else
        p.io->read(lo - p.offset, part);
    }
  }
};

}  // namespace

FlatOptimizer::FlatOptimizer(model::ParameterRegistry& registry, OptimizerSpec spec,
                             std::vector<std::string> state_names, PartitionFn partitions,
                             std::unique_ptr<StateStore> store)
    : spec_(spec),
      registry_(registry),
      partitions_(std::move(partitions)),
      state_names_(std::move(state_names)),
      store_(store ? std::move(store) : std::make_unique<MemoryStore>()) {
  bool first = true;
  for (size_t ui = 0; ui < registry_.size(); ++ui) {
    const UnitPartition part = partition(ui);
    UnitState s;
    s.begin = part.begin;
    s.numel = part.numel();
    if (s.numel == 0) {  // another optimizer's unit: no state here
      units_.push_back(std::move(s));
      continue;
    }
    ZT_CHECK(part.params.data() != nullptr || part.param_store != nullptr, "optimizer built before unit ",
             registry_.unit(ui).name(), " has parameters");
    const Device dev = part.state_device;
    // The step kernels run on the parameters' device: ZeRO-Offload builds its host
    // optimizer over host copies of the partitions (zero/offload_optimizer.h).
    ZT_CHECK(dev == part.params.device(), "optimizer state of unit ", registry_.unit(ui).name(), " on ", dev.name(),
             " but its parameters on ", part.params.device().name());
    const bool sixteen_bit = part.params.dtype() != DType::F32;
    const bool no_master = sixteen_bit && spec_.master_weights == MasterWeights::None;
    // make_optimizer admits MasterWeights::None only with bf16 (or f32) parameters.
    ZT_CHECK(!no_master || part.params.dtype() == DType::BF16, "optimizer without master weights over ",
             dtype_name(part.params.dtype()), " parameters of unit ", registry_.unit(ui).name());
    const DType sdt = no_master ? part.params.dtype() : DType::F32;
    if (first) state_dtype_ = sdt;
    first = false;
    ZT_CHECK(sdt == state_dtype_, "unit ", registry_.unit(ui).name(), " has parameters of another dtype");
    s.master = sixteen_bit && !no_master;
    const int64_t most = std::max<int64_t>(1, store_->max_piece_elements());
    s.first_piece = pieces_.size();
    for (int64_t off = 0; off < s.numel; off += most) {
      const int64_t n = std::min(most, s.numel - off);
      store_->add_unit(pieces_.size(), UnitStateShape{n, sdt, s.master, state_names_.size(), dev});
      pieces_.push_back({ui, off, n});
    }
    s.pieces = pieces_.size() - s.first_piece;
    units_.push_back(std::move(s));
  }
  store_->layout_done();
  copy_params_to_master();
}

UnitPartition FlatOptimizer::partition(size_t unit) {
  if (partitions_) return partitions_(unit);
  return whole_unit(registry_.unit(unit));
}

void FlatOptimizer::copy_params_to_master() {
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const UnitState& s = units_[ui];
    if (s.numel == 0 || !s.master) continue;
    const UnitPartition part = partition(ui);
    std::optional<ParamLease> lease;  // offload_param: the slice from the engine's store
    if (part.param_store) lease.emplace(*part.param_store, part.param_key, ParamIntent::Read);
    const Tensor params = lease ? lease->view() : part.params;
    for (size_t k = s.first_piece; k < s.first_piece + s.pieces; ++k) {
      ops::copy(store_->acquire(k).master, params.narrow(0, pieces_[k].offset, pieces_[k].numel));
      store_->release(k, StateAccess::Modified);
    }
  }
}

void FlatOptimizer::step(float lr, float grad_scale) {
  begin_step();
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    for (size_t next = ui + 1; next < units_.size(); ++next)
      if (units_[next].numel > 0) {
        prefetch_unit(next);
        break;
      }
    step_unit(ui, lr, grad_scale);
  }
}

void FlatOptimizer::prefetch_unit(size_t unit) {
  if (unit < units_.size() && units_[unit].numel > 0) store_->prefetch(units_[unit].first_piece);
}

void FlatOptimizer::begin_step() {
  ZT_CHECK(registry_.size() == units_.size(), "the registry changed after the optimizer was built");
  // Weights loaded after the optimizer was built must reach the master before it is used.
  if (steps_ == 0) copy_params_to_master();
  ++steps_;
}

void FlatOptimizer::step_unit(size_t ui, float lr, float grad_scale) {
  UnitState& s = units_[ui];
  if (s.numel == 0) return;  // another optimizer's unit (or nothing of it on this rank)
  model::Unit& u = registry_.unit(ui);
  const UnitPartition part = partition(ui);
  ZT_CHECK(part.begin == s.begin && part.numel() == s.numel, "the partition of unit ", u.name(),
           " changed after the optimizer was built");
  ZT_CHECK(part.grads.data() != nullptr && part.grads.numel() == part.numel(),
           "optimizer step without gradients for unit ", u.name());
  // One segment per parameter overlapping the partition, in the unit's (ascending) order.
  OptimizerSegments segments;
  int64_t covered = 0;
  for (const model::ParamEntry& p : u.params()) {
    const LocalRange lr_range = overlap(p.offset, p.numel(), part.begin, part.numel());
    if (lr_range.length == 0) continue;
    const float wd = p.spec.decay == model::WeightDecay::Apply ? spec_.weight_decay : 0.0f;
    segments.push_back({lr_range.start, lr_range.length, wd});
    covered += lr_range.length;
  }
  // offload_param: the slice from the engine's store, written back after. With an f32
  // master the update writes every element it covers from the master, so when the
  // segments cover the whole slice nothing is read from the drive; otherwise (gaps,
  // parameters stepped themselves) the old values are needed.
  std::optional<ParamLease> lease;
  if (part.param_store) {
    const bool overwrite = s.master && covered == s.numel;
    lease.emplace(*part.param_store, part.param_key, overwrite ? ParamIntent::Overwrite : ParamIntent::Read);
  }
  const Tensor params = lease ? lease->view() : part.params;
  const size_t end = s.first_piece + s.pieces;
  for (size_t k = s.first_piece; k < end; ++k) {
    if (k + 1 < end) store_->prefetch(k + 1);
    const Piece& piece = pieces_[k];
    // The segments inside the piece, at their offsets in it.
    UnitRange r;
    for (const OptimizerSegment& g : segments) {
      const int64_t lo = std::max(g.offset, piece.offset), hi = std::min(g.offset + g.length, piece.offset + piece.numel);
      if (hi > lo) r.segments.push_back({lo - piece.offset, hi - lo, g.weight_decay});
    }
    if (r.segments.empty()) continue;
    r.param = params.narrow(0, piece.offset, piece.numel).with_name(u.name());
    r.grad = part.grads.narrow(0, piece.offset, piece.numel);
    UnitStateViews state = store_->acquire(k);
    r.master = state.master;
    r.state = std::move(state.state);
    try {
      update_unit(r, lr, grad_scale);
    } catch (...) {
      store_->release(k, StateAccess::Read);
      throw;
    }
    store_->release(k, StateAccess::Modified);
  }
  if (lease) lease->release(ParamChange::Modified);  // written back while the next units step
}

void FlatOptimizer::set_steps_taken(int64_t steps) {
  if (steps < 0) ZT_THROW_INPUT("optimizer step count ", steps, " is negative: the checkpoint is corrupt");
  steps_ = steps;
}

std::vector<StateSlice> FlatOptimizer::state_slices() {
  std::vector<StateSlice> out;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const std::string& unit = registry_.unit(ui).name();
    const UnitState& s = units_[ui];
    if (s.numel == 0) continue;  // not this optimizer's unit
    if (store_->resident()) {
      // In memory (one piece per unit): views the checkpoint reads and writes directly.
      ZT_CHECK(s.pieces == 1, "state in memory is one piece per unit");
      UnitStateViews v = store_->acquire(s.first_piece);
      store_->release(s.first_piece, StateAccess::Read);
      if (s.master) out.push_back({unit + ".master", v.master, s.begin, nullptr});
      for (size_t si = 0; si < state_names_.size(); ++si)
        out.push_back({unit + "." + state_names_[si], v.state[si], s.begin, nullptr});
      continue;
    }
    // Swapped: shapes only, moved by the store's slice I/O (the swap file, in place),
    // piece by piece.
    const auto pieced = [&](int which) {
      auto io = std::make_shared<PiecedSliceIo>();
      for (size_t k = s.first_piece; k < s.first_piece + s.pieces; ++k)
        io->pieces.push_back({pieces_[k].offset, pieces_[k].numel, store_->slice_io(k, which)});
      return io;
    };
    if (s.master) out.push_back({unit + ".master", Tensor(nullptr, {s.numel}, DType::F32), s.begin, pieced(-1)});
    for (size_t si = 0; si < state_names_.size(); ++si)
      out.push_back({unit + "." + state_names_[si], Tensor(nullptr, {s.numel}, state_dtype_), s.begin,
                     pieced(static_cast<int>(si))});
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> FlatOptimizer::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (StateSlice& s : state_slices()) out.emplace_back(std::move(s.name), s.data);
  return out;
}

size_t FlatOptimizer::state_bytes() const { return store_->state_bytes(); }

void FlatOptimizer::set_betas(float beta1, float beta2) {
  spec_.beta1 = beta1;
  spec_.beta2 = beta2;
}

}  // namespace zt::zero
