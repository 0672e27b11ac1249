#include "zero/param_store.h"

#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "zero/param_swap.h"

namespace zt::zero {

namespace {

// Resident slices start at 64-byte boundaries: whole cache lines for the host optimizer's
// vector loads.
size_t cache_aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

// A swapped unit's slice for checkpoints: element ranges moved through an acquire, so the
// newest values are seen (a buffer may hold them ahead of the drive).
class ParamSliceIo final : public SliceIo {
 public:
  ParamSliceIo(ParamStore& store, size_t unit, int64_t numel, DType dtype)
      : store_(store), unit_(unit), numel_(numel), dtype_(dtype) {}
  void read(int64_t offset, const Tensor& dst) override {
    check(offset, dst);
    ParamLease lease(store_, unit_, ParamIntent::Read);
    std::memcpy(dst.data(), lease.view().narrow(0, offset, dst.numel()).data(), dst.nbytes());
  }
  void write(int64_t offset, const Tensor& src) override {
    check(offset, src);
    // A part of the slice (a resume's overlap with one saved rank) keeps the rest.
    const bool whole = offset == 0 && src.numel() == numel_;
    ParamLease lease(store_, unit_, whole ? ParamIntent::Overwrite : ParamIntent::Read);
    std::memcpy(lease.view().narrow(0, offset, src.numel()).data(), src.data(), src.nbytes());
    lease.release(ParamChange::Modified);
  }

 private:
  void check(int64_t offset, const Tensor& t) const {
    ZT_CHECK(t.dtype() == dtype_ && t.device().is_cpu() && offset >= 0 && offset + t.numel() <= numel_,
             "swapped parameters of unit ", unit_, " move as host ", dtype_name(dtype_), " within [0, ", numel_, ")");
  }
  ParamStore& store_;
  size_t unit_;
  int64_t numel_;
  DType dtype_;
};

}  // namespace

ParamStore::ParamStore(Pinning pinning, std::optional<ParamNvme> nvme, int rank)
    : pinning_(pinning), nvme_(std::move(nvme)), rank_(rank) {}

ParamStore::~ParamStore() = default;

void ParamStore::add_unit(int64_t numel, DType dtype) {
  ZT_CHECK(!laid_out_, "parameters declared after the store was laid out");
  units_.push_back(Unit{numel, dtype, true, 0});
}

void ParamStore::layout_done() {
  ZT_CHECK(!laid_out_, "the parameter store is laid out once");
  laid_out_ = true;
  layout_.units = units_.size();
  // Resident in forward order until max_in_cpu elements are used (all of them without
  // NVMe); the rest are swapped.
  int64_t in_cpu = 0;
  bool full = false;
  size_t bytes = 0;
  int64_t largest_swapped = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    full = full || (nvme_ && in_cpu + u.numel > nvme_->max_in_cpu);
    u.resident = !full;
    if (u.resident) {
      in_cpu += u.numel;
      u.offset = bytes;
      bytes += cache_aligned(static_cast<size_t>(u.numel) * dtype_size(u.dtype));
      ++layout_.resident_units;
      layout_.resident_elements += u.numel;
      continue;
    }
    if (!swap_) swap_ = std::make_unique<ParamSwap>(*nvme_, rank_, pinning_);
    swap_->add(i, u.numel, u.dtype);
    layout_.swapped_elements += u.numel;
    largest_swapped = std::max(largest_swapped, u.numel);
  }
  resident_ = HostBuffer(bytes, pinning_);
  layout_.resident_bytes = resident_.bytes();
  layout_.pinned = resident_.pinned() || (swap_ && pinning_ == Pinning::Pinned);
  if (!swap_) return;
  if (nvme_->buffer_size < largest_swapped)
    ZT_WARN("zero_optimization.offload_param.buffer_size ", nvme_->buffer_size,
            " elements is smaller than the largest swapped parameter slice (", largest_swapped,
            " elements): each swap buffer holds one unit's slice, so it takes ", largest_swapped,
            " (DeepSpeed requires buffer_size >= the largest parameter; raise it to silence this)");
  swap_->layout_done();
  layout_.swap_file = swap_->path();
  layout_.swap_file_bytes = swap_->file_bytes();
  layout_.swap_buffers = swap_->buffer_count();
  layout_.swap_buffer_bytes = swap_->buffer_bytes() * static_cast<size_t>(swap_->buffer_count());
}

Tensor ParamStore::resident_view(size_t unit) const {
  const Unit& u = units_[unit];
  return Tensor(static_cast<char*>(resident_.data()) + u.offset, {u.numel}, u.dtype);
}

Tensor ParamStore::shape(size_t unit) const {
  ZT_CHECK(laid_out_, "the parameter store is used before layout_done");
  const Unit& u = units_.at(unit);
  return u.resident ? resident_view(unit) : Tensor(nullptr, {u.numel}, u.dtype);
}

Tensor ParamStore::acquire(size_t unit, ParamIntent intent) {
  ZT_CHECK(laid_out_, "the parameter store is used before layout_done");
  if (units_.at(unit).resident) return resident_view(unit);
  return swap_->acquire(unit, intent);
}

void ParamStore::release(size_t unit, ParamChange change, std::optional<cuda::CopyEvent> reader) {
  // A resident slice is never reused for another unit: a copy reading it needs no tracking.
  if (units_.at(unit).resident) return;
  swap_->release(unit, change, std::move(reader));
}

bool ParamStore::prefetch(size_t unit) {
  if (!swap_ || unit >= units_.size() || units_[unit].resident) return false;
  return swap_->prefetch(unit);
}

void ParamStore::flush() {
  if (swap_) swap_->flush();
}

std::shared_ptr<SliceIo> ParamStore::slice_io(size_t unit) {
  const Unit& u = units_.at(unit);
  if (u.resident) return nullptr;
  return std::make_shared<ParamSliceIo>(*this, unit, u.numel, u.dtype);
}

SwapTraffic ParamStore::traffic() const { return swap_ ? swap_->traffic() : SwapTraffic{}; }

io::IoEngine ParamStore::io_engine() const { return swap_ ? swap_->io_engine() : io::IoEngine::Auto; }

ParamLease::~ParamLease() {
  if (!store_) return;
  try {
    store_->release(unit_, ParamChange::Clean);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): unwinding from the error that matters
  }
}

void ParamLease::release(ParamChange change, std::optional<cuda::CopyEvent> reader) {
  ParamStore* store = std::exchange(store_, nullptr);
  ZT_CHECK(store != nullptr, "a parameter lease released twice");
  store->release(unit_, change, std::move(reader));
}

}  // namespace zt::zero
