#include "core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "core/error.h"

namespace zt {

void* allocate_host_pages(size_t bytes, size_t alignment) {
  // Large buffers (optimizer state, activations on the CPU backend, offload staging) are
  // streamed whole every step: on 2 MiB pages their TLB misses disappear. Where THP is in
  // "madvise" mode (Debian's and Ubuntu's default) only an madvise'd range gets them.
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes >= 8 * kHuge) {
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    if (p) ::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure changes nothing
    return p;
  }
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded);
}

namespace {

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = allocate_host_pages(bytes, 64);
    if (!p) throw Error(ErrorKind::Io, str("out of host memory allocating ", bytes, " bytes"));
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  Device device() const override { return Device::cpu(); }
  void zero(void* ptr, size_t bytes) override {
    if (bytes) std::memset(ptr, 0, bytes);
  }
};

Allocator* g_cuda_allocator = nullptr;

}  // namespace

Allocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

void set_device_allocator(DeviceType type, Allocator* allocator) {
  ZT_CHECK(type == DeviceType::CUDA, "only the CUDA allocator is registered");
  g_cuda_allocator = allocator;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return host_allocator();
  if (!g_cuda_allocator)
    ZT_THROW_UNSUPPORTED("device ", device.name(),
                         " is not available: this build has no CUDA backend or no GPU was found "
                         "(rebuild with -DZT_WITH_CUDA=ON, or use --device cpu)");
  return *g_cuda_allocator;
}

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate(bytes);
}

Buffer::Buffer(size_t bytes, Allocator& allocator)
    : bytes_(bytes), device_(allocator.device()), allocator_(&allocator) {
  data_ = allocator_->allocate(bytes);
}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    allocator_ = std::exchange(other.allocator_, nullptr);
  }
  return *this;
}

void Buffer::zero() {
  if (data_) allocator_->zero(data_, bytes_);
}

void Buffer::reset() {
  if (data_ && allocator_) allocator_->deallocate(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
  allocator_ = nullptr;
}

}  // namespace zt
