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

ZeroEngine::ZeroEngine(model::ParameterRegistry& registry, comm::Communicator& comm, ZeroOptions options,
                       comm::Communicator* scalar_comm)
    : registry_(registry),
      comm_(comm),
      scalar_comm_(scalar_comm ? *scalar_comm : comm),
      options_(options),
      rank_(comm.rank()),
      world_(comm.size()) {
  ZT_CHECK(scalar_comm_.rank() == rank_ && scalar_comm_.size() == world_,
           "the scalar communicator must have the same ranks as the buffer communicator");
  if (options_.stage < 0 || options_.stage > 3)
    ZT_THROW_INPUT("zero_optimization.stage = ", options_.stage, " is not a ZeRO stage: use 0, 1, 2 or 3");
  if (options_.reduce_bucket_size <= 0)
    ZT_THROW_INPUT("zero_optimization.reduce_bucket_size = ", options_.reduce_bucket_size, " must be positive");
  units_.resize(registry_.size());
  for (size_t i = 0; i < registry_.size(); ++i) {
    model::Unit& u = registry_.unit(i);
    if (u.padded_numel() % world_ != 0)
      ZT_THROW_INPUT("unit ", u.name(), " has ", u.padded_numel(), " elements, not a multiple of the world size ",
                     world_, ": build the model with shard_count = world size");
    units_[i].slice = u.padded_numel() / world_;
    units_[i].persistent = options_.stage < 3 || u.numel() < options_.stage3_param_persistence_threshold;
    index_[&u] = i;
  }
}

ZeroEngine::~ZeroEngine() {
  // Collectives still in flight reference our buffers: complete them (or time out) first.
  try {
    for (auto& r : reductions_)
      for (auto& w : r.works) w->wait();
    for (auto& s : units_)
      if (s.gather_work) s.gather_work->wait();
  } catch (const std::exception&) {
    // Destructors do not throw; the job is being torn down by the error that got us here.
  }
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
      fill_slice(u, rank_ * s.slice, s.param_part);
    } else {
      // Into the store (a swapped slice: its buffer, written back to the drive).
      ParamLease lease(*params_, i, ParamIntent::Overwrite);
      const Tensor& host = lease.view();
      host.zero();  // every element written, whatever fill_slice leaves alone
      if (u.device().is_cuda()) {
        // fill_slice writes device memory (it may build the unit there): through a
        // device buffer of one slice.
        const OwnedTensor slice({s.slice}, u.param_dtype(), u.device());
        fill_slice(u, rank_ * s.slice, slice);
        ops::copy(host, slice);
      } else {
        fill_slice(u, rank_ * s.slice, host);
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
  const int64_t begin = rank_ * s.slice;
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

int64_t ZeroEngine::slice_begin(size_t unit) const { return rank_ * units_[unit].slice; }

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
    for (auto& w : r.works) done = w->is_completed() && done;
    if (!done) break;
    finish_reduction(r);
    reductions_.pop_front();
  }
  for (auto& s : units_)
    if (s.gather_work) (void)s.gather_work->is_completed();
}

DType ZeroEngine::comm_dtype(const model::Unit& unit) const {
  // One rank moves nothing: rounding its gradients would only lose precision.
  if (world_ == 1) return unit.grad_dtype();
  return options_.communication_dtype.value_or(unit.grad_dtype());
}

void ZeroEngine::start_reduction(size_t unit) {
  model::Unit& u = registry_.unit(unit);
  const UnitState& s = units_[unit];
  const Tensor flat = u.flat_grads();
  const DType cd = comm_dtype(u);
  const bool convert = cd != flat.dtype();
  // Bytes on the wire: the communication dtype's.
  const double bytes = static_cast<double>(flat.numel()) * static_cast<double>(dtype_size(cd));
  Reduction r;
  r.unit = unit;
  // Buckets of at most reduce_bucket_size elements.
  if (options_.stage == 0) {
    const int64_t n = flat.numel(), bucket = options_.reduce_bucket_size;
    for (int64_t b = 0; b < n; b += bucket) {
      const Tensor piece = flat.narrow(0, b, std::min(bucket, n - b));
      if (!convert) {
        r.works.push_back(comm_.all_reduce_async(piece, comm::ReduceOp::Sum));
        continue;
      }
      OwnedTensor packed({piece.numel()}, cd, flat.device());
      ops::copy(packed, piece);
      add_transient(static_cast<int64_t>(packed->nbytes()));
      r.works.push_back(comm_.all_reduce_async(packed, comm::ReduceOp::Sum));
      r.packed.push_back(std::move(packed));
      r.unpack_begin.push_back(b);
    }
    count(bytes * 2.0 * (world_ - 1) / world_, &volume_.all_reduce);
  } else {
    // A real reduce-scatter: rank r receives the sum of every rank's slice r. A bucket of
    // width w covers [j*w, (j+1)*w) of every slice; when the slice needs several buckets
    // (or another dtype) the strided pieces are packed into one contiguous input first.
    const int64_t P = s.slice;
    const int64_t width = std::max<int64_t>(1, options_.reduce_bucket_size / world_);
    r.output = OwnedTensor({P}, cd, flat.device());
    add_transient(static_cast<int64_t>(r.output->nbytes()));
    if (width >= P && !convert) {
      r.works.push_back(comm_.reduce_scatter_async(flat, r.output));
    } else {
      for (int64_t b = 0; b < P; b += width) {
        const int64_t w = std::min(width, P - b);
        OwnedTensor packed({w * world_}, cd, flat.device());
        for (int q = 0; q < world_; ++q) ops::copy(packed->narrow(0, q * w, w), flat.narrow(0, q * P + b, w));
        add_transient(static_cast<int64_t>(packed->nbytes()));
        r.works.push_back(comm_.reduce_scatter_async(packed, r.output->narrow(0, b, w)));
        r.packed.push_back(std::move(packed));
      }
    }
    count(bytes * (world_ - 1) / world_, &volume_.reduce_scatter);
  }
  reductions_.push_back(std::move(r));
  if (options_.overlap_comm == OverlapComm::Off) finish_all_reductions();
}

void ZeroEngine::finish_reduction(Reduction& r) {
  for (auto& w : r.works) wait_for(*w);
  model::Unit& u = registry_.unit(r.unit);
  UnitState& s = units_[r.unit];
  if (options_.stage == 0) {
    // Converted buckets go back into the full gradient buffer (rounded to its dtype).
    for (size_t k = 0; k < r.unpack_begin.size(); ++k)
      ops::copy(u.flat_grads().narrow(0, r.unpack_begin[k], r.packed[k]->numel()), r.packed[k]);
  } else if (options_.stage == 1) {
    // The owned slice of the full gradient buffer holds the reduced sum.
    ops::copy(u.flat_grads().narrow(0, rank_ * s.slice, s.slice), r.output);
  } else if (options_.stage >= 2) {
    ops::add_inplace(s.grad_part, r.output);
    add_transient(-static_cast<int64_t>(u.flat_grads().nbytes()));
    u.release_grads();
  }
  for (const auto& p : r.packed) add_transient(-static_cast<int64_t>(p->nbytes()));
  if (r.output.view().data()) add_transient(-static_cast<int64_t>(r.output->nbytes()));
  r.works.clear();
  r.packed.clear();
  r.unpack_begin.clear();
  r.output = OwnedTensor();
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
  const double moved = static_cast<double>(full.nbytes()) * (world_ - 1) / world_;
  if (!params_on_host()) {
    count(moved, &volume_.all_gather);
    return comm_.all_gather_async(s.param_part, full);
  }
  // The slice from host memory first. The destination was just allocated on the compute
  // stream (stream-ordered reuse), so the copy waits for the compute queued so far; then
  // it overlaps the compute queued next (normally the unit before this one).
  const Tensor device_slice = world_ == 1 ? full : Tensor();
  if (world_ > 1) {
    s.fetch_buffer = OwnedTensor({s.slice}, full.dtype(), full.device());
    add_transient(static_cast<int64_t>(s.fetch_buffer->nbytes()));
  }
  const Tensor& dst = world_ == 1 ? device_slice : s.fetch_buffer.view();
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
  if (world_ == 1) return nullptr;
  // The collective reads the device slice: after its copy (the collectives follow the
  // compute stream).
  if (s.fetched) {
    s.fetched->order_compute_after();
    s.fetched.reset();
  }
  count(moved, &volume_.all_gather);
  return comm_.all_gather_async(s.fetch_buffer, full);
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

bool ZeroEngine::grads_finite() {
  // The local sum of squares is inf or nan exactly when some local gradient element is.
  const bool finite = std::isfinite(local_sum_of_squares());
  return !timed(&volume_.wait_seconds, [&] { return comm::any_rank(scalar_comm_, !finite); });
}

double ZeroEngine::grad_norm() {
  double sum = local_sum_of_squares();
  // Stage 0: every rank holds the whole reduced gradient; else each holds its slices.
  if (options_.stage >= 1) sum = timed(&volume_.wait_seconds, [&] { return comm::sum_over_ranks(scalar_comm_, sum); });
  return std::sqrt(sum);
}

void ZeroEngine::after_optimizer_step() {
  // Stages 1-2 on one rank updated the full buffer in place; stage 3 updated its separate
  // slice buffer, which gathered (persistent) units must copy even on one rank.
  if (options_.stage == 0 || (world_ == 1 && options_.stage < 3)) return;
  if (offload_ && options_.stage < 3) {
    // The host is still updating the units in forward order: each unit's all-gather waits
    // for its next use (gather_updated), so the forward of the first units runs while
    // the host steps the later ones.
    for (size_t i = 0; i < units_.size(); ++i) units_[i].gather_pending = !registry_.unit(i).frozen();
    return;
  }
  std::vector<comm::WorkPtr> works;
  for (size_t i = 0; i < units_.size(); ++i) {
    model::Unit& u = registry_.unit(i);
    UnitState& s = units_[i];
    if (options_.stage >= 3 && s.gathered == Gathered::No) continue;  // gathered when next used
    if (u.frozen()) continue;                                          // nothing was updated
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
    works.push_back(comm_.all_gather_async(flat.narrow(0, rank_ * s.slice, s.slice), flat));
    count(static_cast<double>(flat.nbytes()) * (world_ - 1) / world_, &volume_.all_gather);
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
  comm::WorkPtr work = comm_.all_gather_async(flat.narrow(0, rank_ * s.slice, s.slice), flat);
  count(static_cast<double>(flat.nbytes()) * (world_ - 1) / world_, &volume_.all_gather);
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
