// Device and pinned-host allocators of the CUDA backend.
//
// CachingDeviceAllocator: a stream-ordered caching allocator for one GPU. Sizes are rounded
// up to a size class; a freed block goes to the free list of its class and is handed out
// again for the next request of that class, so a training loop, which asks for the same
// sizes every step, calls cudaMalloc only during its first step and never cudaFree.
//
// Stream order: every block belongs to the compute stream. A free returns the block to the
// cache at once, without synchronizing: work queued later on the compute stream (the only
// stream that can get the block again) runs after all the work queued earlier that used it.
// Work on another stream (communication, copies) that uses a block must be joined back to
// the compute stream with an event before the block is freed.
//
// Size classes: up to 1 MiB, multiples of 512 B; up to 64 MiB, quarter steps of a power of
// two (1, 1.25, 1.5, 1.75 x 2^k; at most 25% waste); above, multiples of 2 MiB.
//
// When cudaMalloc fails, the cache is emptied (cudaFree of every free block) and the call
// retried once; a second failure throws ErrorKind::Io with the statistics in the message.
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda_api.h"
#include "core/allocator.h"

namespace zt::cuda {

class CachingDeviceAllocator final : public Allocator {
 public:
  CachingDeviceAllocator(int device, cudaStream_t stream);
  ~CachingDeviceAllocator() override;
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda(device_); }
  // cudaMemsetAsync on the compute stream.
  void zero(void* ptr, size_t bytes) override;

  cudaStream_t stream() const { return stream_; }
  MemoryStats stats() const;
  void reset_peak();
  // Synchronizes the stream, then returns every cached free block to the driver.
  void empty_cache();

  static size_t size_class(size_t bytes);

 private:
  void* device_malloc(size_t bytes);  // called with mu_ held
  void release_cached();              // called with mu_ held
  void set_device() const;

  int device_;
  cudaStream_t stream_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  std::unordered_map<void*, size_t> live_;               // block -> size class
  MemoryStats stats_;
};

// cudaHostAlloc'd (page-locked, portable) host memory; device() is Device::cpu().
class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cpu(); }
  void zero(void* ptr, size_t bytes) override;
};

}  // namespace zt::cuda
