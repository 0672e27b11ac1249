#include "zero/state_store.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace zt::zero {

// ---- memory ---------------------------------------------------------------------------------

void MemoryStore::add_unit(size_t unit, const UnitStateShape& shape) {
  if (units_.size() <= unit) units_.resize(unit + 1);
  auto u = std::make_unique<Unit>();
  for (size_t i = 0; i < shape.states; ++i) {
    u->state.push_back(OwnedTensor::zeros({shape.numel}, shape.dtype, shape.device));
    bytes_ += u->state.back()->nbytes();
  }
  if (shape.master) {
    u->master = OwnedTensor({shape.numel}, DType::F32, shape.device);
    bytes_ += u->master->nbytes();
  }
  units_[unit] = std::move(u);
}

UnitStateViews MemoryStore::acquire(size_t unit) {
  ZT_CHECK(unit < units_.size() && units_[unit], "no optimizer state for unit ", unit);
  const Unit& u = *units_[unit];
  UnitStateViews v;
  if (u.master.view().data()) v.master = u.master.view();
  for (const OwnedTensor& t : u.state) v.state.push_back(t.view());
  return v;
}

// ---- NVMe -----------------------------------------------------------------------------------

namespace {

size_t aligned(size_t bytes) { return io::round_up_to_direct(bytes); }

SwapFileOptions swap_file_options(const NvmeStoreOptions& o) { return {o.nvme_path, o.label, o.rank, o.aio}; }

}  // namespace

// A master or state slice of one unit in the swap file.
class NvmeSliceIo final : public SliceIo {
 public:
  NvmeSliceIo(NvmeStore& store, size_t unit, uint64_t offset, DType dtype)
      : store_(store), unit_(unit), offset_(offset), dtype_(dtype) {}
  void read(int64_t offset, const Tensor& dst) override {
    ZT_CHECK(dst.dtype() == dtype_ && dst.device().is_cpu(), "swapped state reads into host ", dtype_name(dtype_));
    store_.flush();
    store_.read_range(at(offset), dst.nbytes(), dst.data());
  }
  void write(int64_t offset, const Tensor& src) override {
    ZT_CHECK(src.dtype() == dtype_ && src.device().is_cpu(), "swapped state writes from host ", dtype_name(dtype_));
    store_.flush();
    // A copy of the unit still in a buffer would be stale: drop it.
    if (NvmeStore::Buffer* b = store_.holding(unit_)) {
      store_.finish_io(*b);  // a prefetch in flight
      ZT_CHECK(b->slot == NvmeStore::Slot::Clean, "writing the swapped state of a unit in use");
      b->slot = NvmeStore::Slot::Free;
    }
    store_.write_range(at(offset), src.nbytes(), src.data());
  }

 private:
  uint64_t at(int64_t offset) const { return offset_ + static_cast<uint64_t>(offset) * dtype_size(dtype_); }
  NvmeStore& store_;
  size_t unit_;
  uint64_t offset_;
  DType dtype_;
};

NvmeStore::NvmeStore(NvmeStoreOptions options) : options_(std::move(options)), file_(swap_file_options(options_)) {
  if (options_.buffer_count < 1) options_.buffer_count = 1;
}

// The transfers in flight use the buffers, which go before the swap file: wait first.
NvmeStore::~NvmeStore() { file_.drain(); }

void NvmeStore::add_unit(size_t unit, const UnitStateShape& shape) {
  ZT_CHECK(!reserved_, "NVMe state declared after the swap file was laid out");
  ZT_CHECK(shape.device.is_cpu(), "NVMe-swapped optimizer state steps on the host");
  if (layout_.size() <= unit) layout_.resize(unit + 1);
  auto l = std::make_unique<Layout>();
  l->shape = shape;
  size_t at = 0;
  if (shape.master) {
    l->master_at = at;
    at += aligned(static_cast<size_t>(shape.numel) * 4);
  }
  for (size_t i = 0; i < shape.states; ++i) {
    l->state_at.push_back(at);
    at += aligned(static_cast<size_t>(shape.numel) * dtype_size(shape.dtype));
  }
  l->bytes = at;
  l->offset = file_bytes_;
  file_bytes_ += at;
  buffer_bytes_ = std::max(buffer_bytes_, at);
  layout_[unit] = std::move(l);
}

void NvmeStore::grow_buffers(size_t bytes) {
  if (reserved_) return;
  reserved_ = true;
  // Fresh state is zero: a reserved file reads as zeros, so nothing is written now.
  file_.reserve(file_bytes_);
  buffers_.resize(static_cast<size_t>(options_.buffer_count));
  for (Buffer& b : buffers_) {
    b.memory = io::AlignedBuffer(bytes);
    file_.register_buffer(b.memory.data(), b.memory.bytes());
  }
}

size_t NvmeStore::memory_bytes() const { return buffers_.size() * buffer_bytes_; }

NvmeStore::Buffer* NvmeStore::holding(size_t unit) {
  for (Buffer& b : buffers_)
    if (b.slot != Slot::Free && b.unit == unit) return &b;
  return nullptr;
}

void NvmeStore::finish_io(Buffer& b) {
  if (b.slot != Slot::Reading && b.slot != Slot::Writing) return;
  file_.wait(b.ticket, b.slot == Slot::Reading ? IoDirection::Read : IoDirection::Write);
  b.slot = Slot::Clean;
}

NvmeStore::Buffer& NvmeStore::free_buffer() {
  for (Buffer& b : buffers_)
    if (b.slot == Slot::Free) return b;
  // The least recently used buffer that is not in use or being read for a coming step;
  // failing that, the oldest prefetch (its read is wasted, but the step goes on).
  Buffer* victim = nullptr;
  for (Buffer& b : buffers_)
    if ((b.slot == Slot::Clean || b.slot == Slot::Writing) && (!victim || b.last_use < victim->last_use)) victim = &b;
  for (Buffer& b : buffers_)
    if (!victim && b.slot == Slot::Reading) victim = &b;
  ZT_CHECK(victim != nullptr, "NVMe offload: all ", buffers_.size(), " buffers are in use");
  finish_io(*victim);
  victim->slot = Slot::Free;
  return *victim;
}

void NvmeStore::start_read(Buffer& b, size_t unit) {
  const Layout& l = *layout_[unit];
  b.unit = unit;
  b.slot = Slot::Reading;
  b.last_use = ++clock_;
  b.ticket = file_.read(b.memory.data(), l.bytes, l.offset);
}

UnitStateViews NvmeStore::views(const Buffer& b, size_t unit) const {
  const Layout& l = *layout_[unit];
  auto* base = static_cast<char*>(b.memory.data());
  UnitStateViews v;
  if (l.shape.master) v.master = Tensor(base + l.master_at, {l.shape.numel}, DType::F32);
  for (size_t at : l.state_at) v.state.push_back(Tensor(base + at, {l.shape.numel}, l.shape.dtype));
  return v;
}

void NvmeStore::prefetch(size_t unit) {
  if (!options_.pipeline_read || unit >= layout_.size() || !layout_[unit]) return;
  grow_buffers(buffer_bytes_);
  if (holding(unit)) return;
  // Only into a buffer that needs no waiting (a prefetch must not stall the step), and
  // only while another buffer stays free or reusable for the piece acquired before it.
  size_t busy = 0;
  for (const Buffer& b : buffers_) busy += b.slot == Slot::Reading || b.slot == Slot::InUse;
  if (busy + 1 >= buffers_.size()) return;
  for (Buffer& b : buffers_)
    if (b.slot == Slot::Free) {
      start_read(b, unit);
      return;
    }
}

UnitStateViews NvmeStore::acquire(size_t unit) {
  ZT_CHECK(unit < layout_.size() && layout_[unit], "no optimizer state for unit ", unit);
  grow_buffers(buffer_bytes_);
  Buffer* b = holding(unit);
  if (b && b->slot == Slot::Writing) finish_io(*b);  // its data is current: reuse it once written
  if (!b) {
    b = &free_buffer();
    start_read(*b, unit);
  }
  ZT_CHECK(b->slot != Slot::InUse, "unit ", unit, " acquired twice");
  finish_io(*b);  // a read (this one, or the prefetch's) done
  b->slot = Slot::InUse;
  b->last_use = ++clock_;
  return views(*b, unit);
}

void NvmeStore::release(size_t unit, StateAccess access) {
  Buffer* b = holding(unit);
  ZT_CHECK(b && b->slot == Slot::InUse, "releasing unit ", unit, " that is not acquired");
  b->last_use = ++clock_;
  if (access == StateAccess::Read) {
    b->slot = Slot::Clean;
    return;
  }
  const Layout& l = *layout_[unit];
  b->ticket = file_.write(b->memory.data(), l.bytes, l.offset);
  b->slot = Slot::Writing;
  if (!options_.pipeline_write) finish_io(*b);
}

void NvmeStore::flush() {
  for (Buffer& b : buffers_)
    if (b.slot == Slot::Writing) finish_io(b);
}

void NvmeStore::read_range(uint64_t offset, size_t bytes, void* dst) {
  grow_buffers(buffer_bytes_);  // the file reserved: fresh state reads as zeros
  file_.read_range(offset, bytes, dst);
}

void NvmeStore::write_range(uint64_t offset, size_t bytes, const void* src) {
  grow_buffers(buffer_bytes_);
  file_.write_range(offset, bytes, src);
}

std::shared_ptr<SliceIo> NvmeStore::slice_io(size_t unit, int which) {
  ZT_CHECK(unit < layout_.size() && layout_[unit], "no optimizer state for unit ", unit);
  const Layout& l = *layout_[unit];
  if (which < 0)
    return std::make_shared<NvmeSliceIo>(*this, unit, l.offset + l.master_at, DType::F32);
  return std::make_shared<NvmeSliceIo>(*this, unit, l.offset + l.state_at[static_cast<size_t>(which)], l.shape.dtype);
}

}  // namespace zt::zero
