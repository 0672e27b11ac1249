// Host memory for ZeRO-Offload: exactly the bytes asked for (rounded up to whole pages),
// page-aligned, and optionally page-locked in place for the GPU's copy engines
// (cuda::HostRegistration), instead of a pinned pool's power-of-two blocks: a 3.1 GB
// gradient staging buffer costs 3.1 GB, not 4. The pages are not touched here, so they
// are placed on the NUMA node of the thread that first writes them (the rank's own).
// Every live buffer is counted (host_buffer_bytes) for the log.
#pragma once
#include <cstddef>
#include <memory>

#include "backend/cuda_api.h"

namespace zt::zero {

enum class Pinning { Pageable, Pinned };

class HostBuffer {
 public:
  HostBuffer() = default;
  // Pinned needs cuda::init(); a refusal (locked-memory limit, no memory) is BadInput
  // naming the bytes and what to change.
  HostBuffer(size_t bytes, Pinning pinning);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return registration_ != nullptr; }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  size_t bytes_ = 0;  // as allocated: whole pages
  std::unique_ptr<cuda::HostRegistration> registration_;
};

// Bytes of the live HostBuffers of this process: all of them, and the page-locked ones.
struct HostBufferBytes {
  size_t total = 0, pinned = 0;
};
HostBufferBytes host_buffer_bytes();

}  // namespace zt::zero
