#include "backend/cuda/allocator.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/check.h"
#include "core/error.h"
#include "core/log.h"

namespace zt::cuda {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * kKiB;

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

std::string mib(size_t bytes) { return str(bytes / kMiB, " MiB"); }

}  // namespace

size_t CachingDeviceAllocator::size_class(size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes <= 1 * kMiB) return round_up(bytes, 512);
  if (bytes <= 64 * kMiB) {
    size_t pow2 = 1 * kMiB;
    while (pow2 * 2 <= bytes) pow2 *= 2;
    return round_up(bytes, pow2 / 4);
  }
  return round_up(bytes, 2 * kMiB);
}

CachingDeviceAllocator::CachingDeviceAllocator(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  // Normally never runs (the backend context lives until exit). Live blocks are left alone.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) ZT_CUDA_WARN(cudaFree(p));
}

void CachingDeviceAllocator::set_device() const {
  int current = -1;
  ZT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_) ZT_CUDA_CHECK(cudaSetDevice(device_));
}

void* CachingDeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    p = device_malloc(size);
  }
  live_.emplace(p, size);
  stats_.bytes_in_use += size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.bytes_in_use);
  return p;
}

void* CachingDeviceAllocator::device_malloc(size_t size) {
  set_device();
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ZT_DEBUG("cuda:", device_, ": cudaMalloc(", size, ") failed; emptying the cache and retrying");
    release_cached();
    err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      ZT_THROW_IO("out of GPU memory on cuda:", device_, " allocating ", size, " bytes (", mib(size),
                  "): zerotrain holds ", mib(stats_.bytes_in_use), " in use and ", mib(stats_.bytes_reserved),
                  " reserved; the device has ", mib(free_b), " free of ", mib(total_b),
                  ". Lower the micro-batch size, enable activation checkpointing, or use a "
                  "higher ZeRO stage / offload");
    }
  }
  ZT_CUDA_CHECK(err);
  stats_.bytes_reserved += size;
  ++stats_.device_mallocs;
  return p;
}

void CachingDeviceAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  ZT_CHECK(it != live_.end(), "cuda:", device_, ": freeing ", ptr,
           " which this allocator did not hand out (or freed twice)");
  const size_t size = it->second;
  ZT_CHECK(size_class(bytes) == size, "cuda:", device_, ": freeing ", ptr, " as ", bytes,
           " bytes, allocated in size class ", size);
  live_.erase(it);
  stats_.bytes_in_use -= size;
  free_[size].push_back(ptr);  // stream-ordered: reusable at once on the compute stream
}

void CachingDeviceAllocator::zero(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
}

MemoryStats CachingDeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingDeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.bytes_in_use;
}

void CachingDeviceAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached();
}

void CachingDeviceAllocator::release_cached() {
  set_device();
  // Blocks in the cache may still be used by queued work on the stream.
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      ZT_CUDA_CHECK(cudaFree(p));
      stats_.bytes_reserved -= size;
      ++stats_.device_frees;
    }
    blocks.clear();
  }
  free_.clear();
}

void* PinnedHostAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ZT_THROW_IO("out of pinned host memory allocating ", bytes, " bytes (", mib(bytes),
                "); check `ulimit -l` and the free host memory");
  }
  ZT_CUDA_CHECK(err);
  return p;
}

void PinnedHostAllocator::deallocate(void* ptr, size_t) {
  if (ptr) ZT_CUDA_WARN(cudaFreeHost(ptr));
}

void PinnedHostAllocator::zero(void* ptr, size_t bytes) {
  if (bytes) std::memset(ptr, 0, bytes);
}

}  // namespace zt::cuda
