// Memory owners. An Allocator hands out raw bytes for one device; a Buffer owns one
// allocation (RAII, move-only). Tensors are views and never own memory.
// The CUDA backend registers its device allocator (a stream-ordered caching allocator)
// with set_device_allocator(); core never includes CUDA headers.
#pragma once
#include <cstddef>

#include "core/device.h"

namespace zt {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
  // Sets bytes to zero (host memset or device memset).
  virtual void zero(void* ptr, size_t bytes) = 0;
};

// 64-byte aligned host memory (cache lines, AVX-512 loads).
Allocator& host_allocator();
// Host memory for std::free: `alignment`-aligned; from 16 MiB up, 2 MiB-aligned and marked
// for transparent huge pages (madvise). Null when out of memory.
void* allocate_host_pages(size_t bytes, size_t alignment);
// The allocator for a device; throws Unsupported for a device with no registered backend.
Allocator& allocator_for(Device device);
void set_device_allocator(DeviceType type, Allocator* allocator);

class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device device = Device::cpu());
  // From a given allocator (e.g. while a backend sets itself up, before it is registered).
  Buffer(size_t bytes, Allocator& allocator);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  void zero();
  void reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
  Allocator* allocator_ = nullptr;
};

}  // namespace zt
