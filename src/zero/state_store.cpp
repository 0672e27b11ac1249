#include "zero/state_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/log.h"
#include "io/staging_dir.h"

namespace zt::zero {

namespace fs = std::filesystem;

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

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "host";
  std::string h(buf);
  std::replace(h.begin(), h.end(), '/', '_');
  return h.empty() ? "host" : h;
}

size_t aligned(size_t bytes) { return io::round_up_to_direct(bytes); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<std::string> remove_stale_swap_folders(const std::string& nvme_path) {
  std::vector<std::string> removed;
  const std::string prefix = "zerotrain-" + host_name() + "-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(nvme_path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (!end || *end != '\0' || pid <= 0 || io::process_alive(pid)) continue;
    std::error_code rec;
    fs::remove_all(e.path(), rec);
    if (!rec) removed.push_back(e.path().string());
  }
  return removed;
}

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

NvmeStore::NvmeStore(NvmeStoreOptions options) : options_(std::move(options)) {
  const std::string& root = options_.nvme_path;
  std::error_code ec;
  // Created when missing, as DeepSpeed's swappers do (the guides' /local_nvme, the seed
  // config's /tmp/zerotrain_nvme).
  fs::create_directories(root, ec);
  if (!fs::is_directory(root, ec))
    ZT_THROW_INPUT("offload nvme_path ", root, ": not a folder and cannot be created",
                   ec ? ": " + ec.message() : std::string(), "; point it at a folder on a local NVMe drive");
  for (const std::string& p : remove_stale_swap_folders(root))
    ZT_WARN("removed ", p, ", the NVMe swap folder of a zerotrain process that is gone");
  folder_ = (fs::path(root) / ("zerotrain-" + host_name() + "-" + std::to_string(::getpid()))).string();
  fs::create_directories(folder_, ec);
  if (ec)
    ZT_THROW_INPUT("offload nvme_path ", root, ": cannot create the swap folder ", folder_, ": ", ec.message(),
                   "; make nvme_path writable");
  // One file per store: several stores of a process (an optimizer's, a test's second one)
  // share the folder, never a file.
  static std::atomic<int> stores{0};
  const int n = stores.fetch_add(1);
  file_path_ = folder_ + "/rank" + std::to_string(options_.rank) + "-" + options_.label +
               (n == 0 ? std::string() : "-" + std::to_string(n)) + ".swp";
  try {
    file_ = io::DirectFile(file_path_, io::FileAccess::ReadWrite);
    if (file_.mode() == io::IoMode::Buffered) ZT_WARN(file_.fallback_reason(), ": NVMe offload swaps through the page cache");
    aio_ = std::make_unique<io::AsyncIo>(options_.aio);
  } catch (...) {
    fs::remove_all(folder_, ec);
    throw;
  }
  if (options_.buffer_count < 1) options_.buffer_count = 1;
}

NvmeStore::~NvmeStore() {
  aio_.reset();  // waits for every transfer
  file_ = io::DirectFile();
  std::error_code ec;
  fs::remove(file_path_, ec);
  fs::remove(folder_, ec);  // only when empty: other stores of this process may share it
}

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
    aio_->register_buffer(b.memory.data(), b.memory.bytes());
  }
}

size_t NvmeStore::memory_bytes() const { return buffers_.size() * buffer_bytes_; }

NvmeStore::Traffic NvmeStore::traffic() const {
  return {read_bytes_.load(std::memory_order_relaxed), written_bytes_.load(std::memory_order_relaxed),
          read_wait_s_.load(std::memory_order_relaxed), write_wait_s_.load(std::memory_order_relaxed)};
}

NvmeStore::Buffer* NvmeStore::holding(size_t unit) {
  for (Buffer& b : buffers_)
    if (b.slot != Slot::Free && b.unit == unit) return &b;
  return nullptr;
}

void NvmeStore::finish_io(Buffer& b) {
  if (b.slot != Slot::Reading && b.slot != Slot::Writing) return;
  const auto t0 = std::chrono::steady_clock::now();
  aio_->wait(b.ticket);
  std::atomic<double>& waited = b.slot == Slot::Reading ? read_wait_s_ : write_wait_s_;
  waited.store(waited.load(std::memory_order_relaxed) + seconds_since(t0), std::memory_order_relaxed);
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
  b.ticket = aio_->read(file_, b.memory.data(), l.bytes, l.offset);
  read_bytes_.fetch_add(l.bytes, std::memory_order_relaxed);
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
  b->ticket = aio_->write(file_, b->memory.data(), l.bytes, l.offset);
  b->slot = Slot::Writing;
  written_bytes_.fetch_add(l.bytes, std::memory_order_relaxed);
  if (!options_.pipeline_write) finish_io(*b);
}

void NvmeStore::flush() {
  for (Buffer& b : buffers_)
    if (b.slot == Slot::Writing) finish_io(b);
}

// The whole direct-I/O blocks around [offset, offset + bytes) read into an aligned bounce
// buffer; `at` is where the range starts in it.
struct NvmeStore::Bounce {
  uint64_t lo;
  size_t at, span;
  io::AlignedBuffer buffer;
};

NvmeStore::Bounce NvmeStore::read_blocks(uint64_t offset, size_t bytes) {
  grow_buffers(buffer_bytes_);
  const uint64_t lo = offset / io::kDirectAlignment * io::kDirectAlignment;
  const size_t span = aligned(static_cast<size_t>(offset - lo) + bytes);
  Bounce b{lo, static_cast<size_t>(offset - lo), span, io::AlignedBuffer(span)};
  file_.read_at(b.buffer.data(), span, lo);
  return b;
}

void NvmeStore::read_range(uint64_t offset, size_t bytes, void* dst) {
  const Bounce b = read_blocks(offset, bytes);
  std::memcpy(dst, static_cast<char*>(b.buffer.data()) + b.at, bytes);
}

void NvmeStore::write_range(uint64_t offset, size_t bytes, const void* src) {
  Bounce b = read_blocks(offset, bytes);  // the neighbours' bytes in the first and last blocks
  std::memcpy(static_cast<char*>(b.buffer.data()) + b.at, src, bytes);
  file_.write_at(b.buffer.data(), b.span, b.lo);
}

std::shared_ptr<SliceIo> NvmeStore::slice_io(size_t unit, int which) {
  ZT_CHECK(unit < layout_.size() && layout_[unit], "no optimizer state for unit ", unit);
  const Layout& l = *layout_[unit];
  if (which < 0)
    return std::make_shared<NvmeSliceIo>(*this, unit, l.offset + l.master_at, DType::F32);
  return std::make_shared<NvmeSliceIo>(*this, unit, l.offset + l.state_at[static_cast<size_t>(which)], l.shape.dtype);
}

}  // namespace zt::zero
