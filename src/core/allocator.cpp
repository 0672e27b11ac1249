#include "core/allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "core/error.h"

namespace zt {
namespace {

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
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
