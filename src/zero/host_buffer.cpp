#include "zero/host_buffer.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"

namespace zt::zero {
namespace {

std::atomic<size_t> g_total{0}, g_pinned{0};

size_t page_size() {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 4096;
}

}  // namespace

HostBuffer::HostBuffer(size_t bytes, Pinning pinning) {
  if (bytes == 0) return;
  const size_t page = page_size();
  const size_t rounded = (bytes + page - 1) / page * page;
  data_ = allocate_host_pages(rounded, page);
  if (data_ == nullptr)
    ZT_THROW_INPUT("cannot allocate ", rounded, " bytes of host memory for ZeRO-Offload: free host memory, use more "
                   "ranks/nodes, or lower offload_optimizer.ratio");
  bytes_ = rounded;
  g_total += bytes_;
  if (pinning == Pinning::Pinned) {
    try {
      registration_ = std::make_unique<cuda::HostRegistration>(data_, bytes_);
    } catch (...) {
      release();
      throw;
    }
    g_pinned += bytes_;
  }
}

HostBuffer::~HostBuffer() { release(); }

void HostBuffer::release() noexcept {
  if (registration_) {
    registration_.reset();
    g_pinned -= bytes_;
  }
  if (data_) {
    std::free(data_);
    g_total -= bytes_;
  }
  data_ = nullptr;
  bytes_ = 0;
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      registration_(std::move(other.registration_)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    registration_ = std::move(other.registration_);
  }
  return *this;
}

HostBufferBytes host_buffer_bytes() { return {g_total.load(), g_pinned.load()}; }

}  // namespace zt::zero
