#include "zero/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/elementwise.h"

namespace zt::zero {

int64_t zero_formula_bytes(int stage, int64_t numel, int world_size, int param_bytes, int grad_bytes,
                           int grad_partition_bytes, int optimizer_bytes) {
  const int64_t n = numel, W = world_size;
  const int64_t params = stage >= 3 ? n * param_bytes / W : n * param_bytes;
  const int64_t grads = stage >= 2 ? n * grad_partition_bytes / W : n * grad_bytes;
  const int64_t optimizer = stage >= 1 ? n * optimizer_bytes / W : n * optimizer_bytes;
  return params + grads + optimizer;
}

namespace {

// One world for every unit: host scalars over scalar_comm (else comm), buffers over comm.
EngineGroups world_groups(const model::ParameterRegistry& registry, comm::Communicator& comm,
                          comm::Communicator* scalar_comm) {
  ZT_CHECK(!scalar_comm || (scalar_comm->rank() == comm.rank() && scalar_comm->size() == comm.size()),
           "the scalar communicator must have the same ranks as the buffer communicator");
  const comm::Group world = scalar_comm ? comm::Group(*scalar_comm, &comm) : comm::Group(comm);
  EngineGroups g;
  g.units.assign(registry.size(), UnitGroup{world, 0});
  g.norm = world;
  return g;
}

}  // namespace

EngineGroups dense_unit_groups(const comm::Mesh& mesh, const model::ParameterRegistry& registry) {
  EngineGroups g;
  g.units.assign(registry.size(), UnitGroup{mesh.data_parallel(), mesh.coords().tp});
  g.norm = mesh.world();
  return g;
}

ZeroEngine::ZeroEngine(model::ParameterRegistry& registry, comm::Communicator& comm, ZeroOptions options,
                       comm::Communicator* scalar_comm)
    : ZeroEngine(registry, world_groups(registry, comm, scalar_comm), options) {}

ZeroEngine::ZeroEngine(model::ParameterRegistry& registry, EngineGroups groups, ZeroOptions options)
    : registry_(registry),
      norm_(groups.norm),
      options_(options),
      reduction_(make_sum_reduction(options.communication_dtype)),
      rank_(groups.norm.rank()),
      world_(groups.norm.size()) {
  ZT_CHECK(groups.units.size() == registry_.size(), "the engine has ", groups.units.size(), " unit groups for ",
           registry_.size(), " units");
  if (options_.stage < 0 || options_.stage > 3)
    ZT_THROW_INPUT("zero_optimization.stage = ", options_.stage, " is not a ZeRO stage: use 0, 1, 2 or 3");
  if (options_.reduce_bucket_size <= 0)
    ZT_THROW_INPUT("zero_optimization.reduce_bucket_size = ", options_.reduce_bucket_size, " must be positive");
  units_.resize(registry_.size());
  for (size_t i = 0; i < registry_.size(); ++i) {
    model::Unit& u = registry_.unit(i);
    UnitState& s = units_[i];
    ZT_CHECK(groups.units[i].group.valid(), "unit ", u.name(), " has no group");
    s.group = groups.units[i].group;
    s.rank = s.group.rank();
    s.size = s.group.size();
    s.tp_rank = groups.units[i].tp_rank;
    if (u.padded_numel() % s.size != 0)
      ZT_THROW_INPUT("unit ", u.name(), " has ", u.padded_numel(), " elements, not a multiple of its group's size ",
                     s.size, ": build the model with shard_count = the data-parallel size");
    units_[i].slice = u.padded_numel() / s.size;
    units_[i].persistent = options_.stage < 3 || u.numel() < options_.stage3_param_persistence_threshold;
    index_[&u] = i;
  }
}

ZeroEngine::~ZeroEngine() {
  // Collectives still in flight reference our buffers: complete them (or time out) first.
  try {
    for (auto& r : reductions_)
      for (auto& w : r.work.works) w->wait();
    for (auto& s : units_)
      if (s.gather_work) s.gather_work->wait();
  } catch (const std::exception&) {
    // Destructors do not throw; the job is being torn down by the error that got us here.
  }
}

void ZeroEngine::set_gradient_reduction(std::unique_ptr<GradReduction> reduction) {
  ZT_CHECK(reduction, "set_gradient_reduction needs a strategy");
  ZT_CHECK(reductions_.empty(), "the gradient reduction changes between steps, not during one");
  reduction->check_stage(options_.stage);
  reduction_ = std::move(reduction);
}

size_t ZeroEngine::index_of(const model::Unit& unit) const {
  const auto it = index_.find(&unit);
  ZT_CHECK(it != index_.end(), "unit ", unit.name(), " is not in the engine's registry");
  return it->second;
}

void ZeroEngine::count(double bytes, double* bucket) {
  *bucket += bytes;
  ++volume_.calls;
}

namespace {
// Runs f, adding the host seconds it took to *seconds.
template <class F>
auto timed(double* seconds, F f) {
  struct Clock {
    double* seconds;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Clock() { *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } clock{seconds};
  return f();
}
}  // namespace

void ZeroEngine::wait_for(comm::Work& w) {
  timed(&volume_.wait_seconds, [&] { w.wait(); });
}

void ZeroEngine::add_transient(int64_t bytes) {
  transient_bytes_ += bytes;
  transient_peak_ = std::max(transient_peak_, transient_bytes_);
}

// ---- set-up -------------------------------------------------------------------------

void ZeroEngine::shard_model() {
  if (options_.stage >= 3) {
    // The slices come from the full parameters every rank holds.
    shard_model_from_slices([](model::Unit& u, int64_t begin, const Tensor& out) {
      ops::copy(out, u.flat_params().narrow(0, begin, out.numel()));
    });
    return;
  }
  ZT_CHECK(!sharded_, "the model is already sharded");
  sharded_ = true;
  if (options_.stage >= 2)
    for (size_t i = 0; i < units_.size(); ++i) partition_gradients(i);
}

void ZeroEngine::partition_gradients(size_t unit) {
  model::Unit& u = registry_.unit(unit);
  if (u.frozen()) return;  // no gradients at all
  units_[unit].grad_part = OwnedTensor::zeros({units_[unit].slice}, DType::F32, u.device());
  u.release_grads();
}

void ZeroEngine::shard_model_from_slices(const std::function<void(model::Unit&, int64_t, const Tensor&)>& fill_slice) {
  ZT_CHECK(options_.stage >= 3, "shard_model_from_slices is for stage 3");
  ZT_CHECK(!sharded_, "the model is already sharded");
  sharded_ = true;
  if (params_on_host()) allocate_host_params();
  for (size_t i = 0; i < units_.size(); ++i) {
    model::Unit& u = registry_.unit(i);
    UnitState& s = units_[i];
    if (!params_on_host()) {
      s.param_owned = OwnedTensor({s.slice}, u.param_dtype(), u.device());
      s.param_part = s.param_owned.view();
      fill_slice(u, s.rank * s.slice, s.param_part);
    } else {
      // Into the store (a swapped slice: its buffer, written back to the drive).
      ParamLease lease(*params_, i, ParamIntent::Overwrite);
      const Tensor& host = lease.view();
      host.zero();  // every element written, whatever fill_slice leaves alone
      if (u.device().is_cuda()) {
        // fill_slice writes device memory (it may build the unit there): through a
        // device buffer of one slice.
        const OwnedTensor slice({s.slice}, u.param_dtype(), u.device());
        fill_slice(u, s.rank * s.slice, slice);
        ops::copy(host, slice);
      } else {
        fill_slice(u, s.rank * s.slice, host);
      }
      lease.release(ParamChange::Modified);
    }
    // fill_slice may have left the full unit in place (it had it, or built it to cut the
    // slice): persistent units keep it, the others free it; a persistent unit without it
    // is gathered from every rank's slice (collective: all ranks reach it in unit order).
    if (u.has_params() && !s.persistent) u.release_params();
    s.gathered = u.has_params() ? Gathered::Yes : Gathered::No;
    if (s.persistent) ensure_gathered(i);
    partition_gradients(i);
  }
}

void ZeroEngine::allocate_host_params() {
  // Page-locked on the GPU so that the copies are asynchronous.
  bool gpu = false;
  for (size_t i = 0; i < units_.size(); ++i) gpu = gpu || registry_.unit(i).device().is_cuda();
  const Pinning pinning = gpu && options_.param_home == ParamHome::PinnedHost ? Pinning::Pinned : Pinning::Pageable;
  params_ = std::make_unique<ParamStore>(pinning, options_.param_nvme, rank_);
  for (size_t i = 0; i < units_.size(); ++i) params_->add_unit(units_[i].slice, registry_.unit(i).param_dtype());
  params_->layout_done();
  if (gpu) fetch_stream_ = std::make_unique<cuda::CopyStream>();
}

UnitPartition ZeroEngine::partition(size_t unit) {
  model::Unit& u = registry_.unit(unit);
  UnitState& s = units_[unit];
  if (options_.stage == 0 || u.frozen()) return whole_unit(u);
  const int64_t begin = s.rank * s.slice;
  UnitPartition p;
  p.begin = begin;
  p.state_device = u.device();
  if (params_) {
    p.params = params_->shape(unit);
    p.param_store = params_.get();
    p.param_key = unit;
  } else {
    p.params = options_.stage >= 3 ? s.param_part : u.flat_params().narrow(0, begin, s.slice);
  }
  if (options_.stage >= 2) {
    p.grads = s.grad_part.view();
  } else if (u.has_grads()) {
    p.grads = u.flat_grads().narrow(0, begin, s.slice);
  }
  return p;
}

ParamSlice ZeroEngine::param_slice(size_t unit) {
  if (offload_) offload_->before_params_used(unit);
  const UnitState& s = units_[unit];
  const int64_t begin = slice_begin(unit);
  if (params_) return {params_->shape(unit), begin, params_->slice_io(unit)};
  if (options_.stage >= 3) return {s.param_part, begin, nullptr};
  return {registry_.unit(unit).flat_params().narrow(0, begin, s.slice), begin, nullptr};
}

int64_t ZeroEngine::slice_begin(size_t unit) const { return units_[unit].rank * units_[unit].slice; }

ParamSlice ZeroEngine::param_load_target(size_t unit) {
  gather_updated(unit);  // a gather left pending would overwrite what is loaded
  if (offload_) offload_->before_params_used(unit);
  if (options_.stage >= 3) return param_slice(unit);
  return {registry_.unit(unit).flat_params(), 0, nullptr};
}

void ZeroEngine::refresh_after_load() {
  // An fp32 run without master weights steps the host's copy of the parameters: it must
  // take the loaded ones, or the first step after a resume updates the initial weights.
  if (offload_) offload_->params_loaded();
  if (options_.stage < 3) return;
  // Persistent and currently gathered units hold full copies of the loaded slices.
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i].gathered == Gathered::Yes) {
      const comm::WorkPtr work = gather_into(i, registry_.unit(i).flat_params());
      if (work) wait_for(*work);
      finish_gather(i);
    }
}

// ---- the accumulation -----------------------------------------------------------------

void ZeroEngine::zero_grads() {
  if (offload_) offload_->before_gradients_reset();
  for (size_t i = 0; i < units_.size(); ++i) {
    model::Unit& u = registry_.unit(i);
    if (u.has_grads()) u.flat_grads().zero();
    if (units_[i].grad_part.view().data()) units_[i].grad_part->zero();
  }
}

void ZeroEngine::begin_micro_batch(bool last) {
  // Stages 0-1 accumulate locally and reduce once per step; stages 2-3 reduce every
  // micro-batch so that no rank ever holds a full gradient across micro-batches.
  reduce_this_micro_batch_ = options_.stage >= 2 || last;
  last_micro_batch_ = last;
}

void ZeroEngine::end_micro_batch() {
  finish_all_reductions();
  flush();
}

void ZeroEngine::flush() {
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i].release_pending) release_unit(i);
}

void ZeroEngine::poll() {
  // MPI progresses non-blocking collectives only inside MPI calls: testing them from the
  // hooks is what lets communication advance while the next unit computes.
  while (!reductions_.empty()) {
    Reduction& r = reductions_.front();
    bool done = true;
    for (auto& w : r.work.works) done = w->is_completed() && done;
    if (!done) break;
    finish_reduction(r);
    reductions_.pop_front();
  }
  for (auto& s : units_)
    if (s.gather_work) (void)s.gather_work->is_completed();
}

ReductionRequest ZeroEngine::reduction_request(size_t unit) {
  ReductionRequest q;
  q.unit = unit;
  q.grads = registry_.unit(unit).flat_grads();
  q.comm = &units_[unit].group.buffers();
  q.stage = options_.stage;
  q.slice = units_[unit].slice;
  q.bucket_size = options_.reduce_bucket_size;
  return q;
}

void ZeroEngine::start_reduction(size_t unit) {
  Reduction r;
  r.unit = unit;
  r.work = reduction_->start(reduction_request(unit));
  const ReductionWork& w = r.work;
  if (w.output.view().data()) add_transient(static_cast<int64_t>(w.output->nbytes()));
  for (const auto& p : w.packed) add_transient(static_cast<int64_t>(p->nbytes()));
  // Bytes on the wire: the communication dtype's, as the ring algorithms move them.
  const int W = units_[unit].size;
  if (w.collective == Collective::AllReduce) count(w.wire_bytes * 2.0 * (W - 1) / W, &volume_.all_reduce);
  if (w.collective == Collective::ReduceScatter) count(w.wire_bytes * (W - 1) / W, &volume_.reduce_scatter);
  reductions_.push_back(std::move(r));
  if (options_.overlap_comm == OverlapComm::Off) finish_all_reductions();
}

void ZeroEngine::finish_reduction(Reduction& r) {
  ReductionWork& work = r.work;
  for (auto& w : work.works) wait_for(*w);
  model::Unit& u = registry_.unit(r.unit);
  UnitState& s = units_[r.unit];
  reduction_->finish(reduction_request(r.unit), work);
  const bool summed = work.output.view().data() != nullptr;
  if (options_.stage == 1 && summed) {
    // The owned slice of the full gradient buffer holds the reduced sum.
    ops::copy(u.flat_grads().narrow(0, s.rank * s.slice, s.slice), work.output);
  } else if (options_.stage >= 2) {
    ops::add_inplace(s.grad_part, work.output);
    add_transient(-static_cast<int64_t>(u.flat_grads().nbytes()));
    u.release_grads();
  }
  for (const auto& p : work.packed) add_transient(-static_cast<int64_t>(p->nbytes()));
  if (summed) add_transient(-static_cast<int64_t>(work.output->nbytes()));
  work = ReductionWork();
  if (last_micro_batch_ && offload_) offload_->gradient_ready(r.unit, partition(r.unit).grads);
}

void ZeroEngine::finish_all_reductions() {
  while (!reductions_.empty()) {
    finish_reduction(reductions_.front());
    reductions_.pop_front();
  }
}

// ---- stage 3 gathering ----------------------------------------------------------------

void ZeroEngine::start_gather(size_t unit) {
  if (offload_) offload_->before_params_used(unit);
  model::Unit& u = registry_.unit(unit);
  UnitState& s = units_[unit];
  u.allocate_params_uninitialized(u.param_dtype(), u.device());
  if (!s.persistent) add_transient(static_cast<int64_t>(u.flat_params().nbytes()));
  s.gather_work = gather_into(unit, u.flat_params());
  s.gathered = Gathered::InFlight;
}

comm::WorkPtr ZeroEngine::gather_into(size_t unit, const Tensor& full) {
  UnitState& s = units_[unit];
  const int W = s.size;
  comm::Communicator& comm = s.group.buffers();
  const double moved = static_cast<double>(full.nbytes()) * (W - 1) / W;
  if (!params_on_host()) {
    count(moved, &volume_.all_gather);
    return comm.all_gather_async(s.param_part, full);
  }
  // The slice from host memory first. The destination was just allocated on the compute
  // stream (stream-ordered reuse), so the copy waits for the compute queued so far; then
  // it overlaps the compute queued next (normally the unit before this one).
  const Tensor device_slice = W == 1 ? full : Tensor();
  if (W > 1) {
    s.fetch_buffer = OwnedTensor({s.slice}, full.dtype(), full.device());
    add_transient(static_cast<int64_t>(s.fetch_buffer->nbytes()));
  }
  const Tensor& dst = W == 1 ? device_slice : s.fetch_buffer.view();
  ParamLease lease(*params_, unit, ParamIntent::Read);
  const Tensor& host = lease.view();
  if (fetch_stream_) {
    fetch_stream_->wait_for_compute();
    fetch_stream_->to_device(dst.data(), host.data(), host.nbytes());
    s.fetched = fetch_stream_->record();
    // The store keeps the buffer until the copy is done; the compute stream waits for
    // the copy itself (finish_gather), not for the host.
    lease.release(ParamChange::Clean, fetch_stream_->record());
  } else {
    ops::copy(dst, host);
    lease.release(ParamChange::Clean);
  }
  if (W == 1) return nullptr;
  // The collective reads the device slice: after its copy (the collectives follow the
  // compute stream).
  if (s.fetched) {
    s.fetched->order_compute_after();
    s.fetched.reset();
  }
  count(moved, &volume_.all_gather);
  return comm.all_gather_async(s.fetch_buffer, full);
}

void ZeroEngine::finish_gather(size_t unit) {
  UnitState& s = units_[unit];
  if (s.gather_work) {
    wait_for(*s.gather_work);
    s.gather_work.reset();
  }
  if (s.fetched) {
    s.fetched->order_compute_after();  // the GPU waits for the copy; the host does not
    s.fetched.reset();
  }
  if (s.fetch_buffer->data() != nullptr) {
    add_transient(-static_cast<int64_t>(s.fetch_buffer->nbytes()));
    s.fetch_buffer = OwnedTensor();
  }
}

void ZeroEngine::ensure_gathered(size_t unit) {
  UnitState& s = units_[unit];
  s.release_pending = false;
  if (s.gathered == Gathered::No) start_gather(unit);
  if (s.gathered == Gathered::InFlight) {
    finish_gather(unit);
    s.gathered = Gathered::Yes;
  }
}

void ZeroEngine::release_unit(size_t unit) {
  UnitState& s = units_[unit];
  s.release_pending = false;
  if (s.persistent || s.gathered == Gathered::No) return;
  finish_gather(unit);  // the buffer is freed on the compute stream: after its writers
  model::Unit& u = registry_.unit(unit);
  add_transient(-static_cast<int64_t>(u.flat_params().nbytes()));
  u.release_params();
  s.gathered = Gathered::No;
}

void ZeroEngine::release_pending_except(size_t keep) {
  for (size_t i = 0; i < units_.size(); ++i)
    if (i != keep && units_[i].release_pending) release_unit(i);
}

int64_t ZeroEngine::gathered_live_elements() const {
  int64_t n = 0;
  for (size_t i = 0; i < units_.size(); ++i)
    if (!units_[i].persistent && units_[i].gathered != Gathered::No) n += registry_.unit(i).padded_numel();
  return n;
}

void ZeroEngine::prefetch_swapped(size_t from, int direction) {
  // The next slices not gathered, in use order, until the store has no buffer to spare
  // (it never waits): their reads run while this unit computes.
  for (int64_t i = static_cast<int64_t>(from) + direction; i >= 0 && i < static_cast<int64_t>(units_.size());
       i += direction) {
    const size_t k = static_cast<size_t>(i);
    if (units_[k].gathered != Gathered::No || params_->resident(k)) continue;
    if (!params_->prefetch(k)) break;
  }
}

void ZeroEngine::prefetch(size_t from, int direction) {
  if (params_) prefetch_swapped(from, direction);
  if (options_.stage3_prefetch_bucket_size <= 0) return;
  int64_t budget = options_.stage3_prefetch_bucket_size;
  int64_t live = gathered_live_elements();
  for (int64_t i = static_cast<int64_t>(from) + direction; i >= 0 && i < static_cast<int64_t>(units_.size());
       i += direction) {
    const size_t k = static_cast<size_t>(i);
    if (units_[k].gathered != Gathered::No) continue;
    const int64_t n = registry_.unit(k).padded_numel();
    if (n > budget || live + n > options_.stage3_max_live_parameters) break;
    start_gather(k);
    budget -= n;
    live += n;
  }
}

// ---- hooks ------------------------------------------------------------------------------

void ZeroEngine::before_forward(model::Unit& unit) {
  const size_t i = index_of(unit);
  gather_updated(i);
  if (offload_) offload_->before_params_used(i);
  poll();
  if (options_.stage < 3) return;
  release_pending_except(i);
  ensure_gathered(i);
  prefetch(i, +1);
}

void ZeroEngine::after_forward(model::Unit& unit) {
  // Released lazily: the head's forward is followed at once by its backward, which would
  // otherwise gather it again.
  if (options_.stage >= 3) units_[index_of(unit)].release_pending = true;
}

void ZeroEngine::before_backward(model::Unit& unit) {
  const size_t i = index_of(unit);
  gather_updated(i);
  if (offload_) offload_->before_params_used(i);
  poll();
  if (options_.stage >= 3) {
    release_pending_except(i);
    ensure_gathered(i);
    prefetch(i, -1);
  }
  if (options_.stage >= 2 && !unit.frozen() && !unit.has_grads()) {
    unit.allocate_grads(unit.grad_dtype(), unit.device());
    add_transient(static_cast<int64_t>(unit.flat_grads().nbytes()));
  }
}

void ZeroEngine::after_backward(model::Unit& unit) {
  const size_t i = index_of(unit);
  if (reduce_this_micro_batch_ && !unit.frozen()) start_reduction(i);
  if (options_.stage >= 3) units_[i].release_pending = true;
  poll();
}

// ---- the step -----------------------------------------------------------------------

double ZeroEngine::local_sum_of_squares() {
  finish_all_reductions();
  // Accumulated on the gradients' device, read back once (one host synchronisation per
  // call, not one per unit); the same bits as summing each unit's sum_of_squares in order.
  std::optional<ops::SumOfSquares> sum;
  for (size_t i = 0; i < units_.size(); ++i) {
    const UnitPartition p = partition(i);
    if (!p.grads.data()) continue;
    if (!sum) sum.emplace(p.grads.device());
    sum->add(p.grads);
  }
  return sum ? sum->value() : 0.0;
}

bool ZeroEngine::data_parallel_only() const {
  for (const UnitState& s : units_)
    if (s.size != world_ || s.tp_rank != 0) return false;
  return true;
}

double ZeroEngine::counted_sum_of_squares() {
  finish_all_reductions();
  std::optional<ops::SumOfSquares> sum;
  const auto add = [&](const Tensor& t) {
    if (!sum) sum.emplace(t.device());
    sum->add(t);
  };
  for (size_t i = 0; i < units_.size(); ++i) {
    const UnitPartition p = partition(i);
    const UnitState& s = units_[i];
    if (!p.grads.data()) continue;
    // Stage 0: every rank of the unit's group holds the same reduced sum.
    if (options_.stage == 0 && s.rank != 0) continue;
    if (s.tp_rank == 0) {
      add(p.grads);
      continue;
    }
    // A tensor rank > 0: its shards of the split parameters; the replicated ones are
    // counted by tensor rank 0.
    for (const model::ParamEntry& e : registry_.unit(i).params()) {
      if (e.spec.tp_split == model::TpSplit::None) continue;
      const LocalRange r = overlap(e.offset, e.numel(), p.begin, p.grads.numel());
      if (r.length > 0) add(p.grads.narrow(0, r.start, r.length));
    }
  }
  return sum ? sum->value() : 0.0;
}

bool ZeroEngine::grads_finite() {
  // The local sum of squares is inf or nan exactly when some local gradient element is.
  const bool finite = std::isfinite(local_sum_of_squares());
  return !timed(&volume_.wait_seconds, [&] { return comm::any_rank(norm_.host(), !finite); });
}

double ZeroEngine::grad_norm() {
  if (!data_parallel_only()) {
    const double local = counted_sum_of_squares();
    return std::sqrt(timed(&volume_.wait_seconds, [&] { return comm::sum_over_ranks(norm_.host(), local); }));
  }
  double sum = local_sum_of_squares();
  // Stage 0: every rank holds the whole reduced gradient; else each holds its slices.
  if (options_.stage >= 1) sum = timed(&volume_.wait_seconds, [&] { return comm::sum_over_ranks(norm_.host(), sum); });
  return std::sqrt(sum);
}

void ZeroEngine::after_optimizer_step() {
  // Stages 1-2 on one rank updated the full buffer in place; stage 3 updated its separate
  // slice buffer, which gathered (persistent) units must copy even on one rank.
  // (A unit whose group is this rank alone is such a unit.)
  const auto alone = [&](size_t i) { return units_[i].size == 1 && options_.stage < 3; };
  bool all_alone = true;
  for (size_t i = 0; i < units_.size(); ++i) all_alone = all_alone && alone(i);
  if (options_.stage == 0 || all_alone) return;
  if (offload_ && options_.stage < 3) {
    // The host is still updating the units in forward order: each unit's all-gather waits
    // for its next use (gather_updated), so the forward of the first units runs while
    // the host steps the later ones.
    for (size_t i = 0; i < units_.size(); ++i) units_[i].gather_pending = !registry_.unit(i).frozen() && !alone(i);
    return;
  }
  std::vector<comm::WorkPtr> works;
  for (size_t i = 0; i < units_.size(); ++i) {
    model::Unit& u = registry_.unit(i);
    UnitState& s = units_[i];
    if (options_.stage >= 3 && s.gathered == Gathered::No) continue;  // gathered when next used
    if (u.frozen()) continue;                                          // nothing was updated
    if (alone(i)) continue;
    if (s.gathered == Gathered::InFlight) {
      finish_gather(i);
      s.gathered = Gathered::Yes;
    }
    if (offload_) offload_->before_params_used(i);
    const Tensor flat = u.flat_params();
    if (options_.stage >= 3) {
      s.gather_work = gather_into(i, flat);
      continue;
    }
    works.push_back(s.group.buffers().all_gather_async(flat.narrow(0, s.rank * s.slice, s.slice), flat));
    count(static_cast<double>(flat.nbytes()) * (s.size - 1) / s.size, &volume_.all_gather);
  }
  for (auto& w : works) wait_for(*w);
  if (options_.stage >= 3)
    for (size_t i = 0; i < units_.size(); ++i)
      if (units_[i].gathered == Gathered::Yes) finish_gather(i);
}

void ZeroEngine::gather_updated(size_t unit) {
  UnitState& s = units_[unit];
  if (!s.gather_pending) return;
  s.gather_pending = false;
  if (offload_) offload_->before_params_used(unit);
  const Tensor flat = registry_.unit(unit).flat_params();
  comm::WorkPtr work = s.group.buffers().all_gather_async(flat.narrow(0, s.rank * s.slice, s.slice), flat);
  count(static_cast<double>(flat.nbytes()) * (s.size - 1) / s.size, &volume_.all_gather);
  wait_for(*work);
}

void ZeroEngine::gather_full_model() {
  for (size_t i = 0; i < units_.size(); ++i) {
    gather_updated(i);
    if (offload_) offload_->before_params_used(i);
    if (options_.stage >= 3) ensure_gathered(i);
  }
}

void ZeroEngine::gather_trainable_units() {
  for (size_t i = 0; i < units_.size(); ++i) {
    if (registry_.unit(i).frozen()) continue;
    gather_updated(i);
    if (offload_) offload_->before_params_used(i);
    if (options_.stage >= 3) ensure_gathered(i);
  }
}

void ZeroEngine::release_full_model() {
  if (options_.stage < 3) return;
  for (size_t i = 0; i < units_.size(); ++i) release_unit(i);
}

ModelStateBytes ZeroEngine::memory(int64_t optimizer_state_bytes) const {
  ModelStateBytes m;
  for (size_t i = 0; i < units_.size(); ++i) {
    const model::Unit& u = registry_.unit(i);
    const UnitState& s = units_[i];
    const int64_t full_p = u.padded_numel() * static_cast<int64_t>(dtype_size(u.param_dtype()));
    const int64_t full_g = u.padded_numel() * static_cast<int64_t>(dtype_size(u.grad_dtype()));
    if (options_.stage >= 3) {
      // Device bytes: the owned slice unless it lives on the host (param offload).
      const int64_t slice = params_on_host() ? 0 : static_cast<int64_t>(s.param_part.nbytes());
      m.params += slice + (s.persistent ? full_p : 0);
    } else {
      m.params += full_p;
    }
    if (!u.frozen()) m.grads += options_.stage >= 2 ? static_cast<int64_t>(s.slice * 4) : full_g;
  }
  m.optimizer = optimizer_state_bytes;
  m.buffers_peak = transient_peak_;
  return m;
}

}  // namespace zt::zero
