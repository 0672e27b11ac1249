#include "backend/cuda/stream.h"

#include <utility>

#include "backend/cuda/check.h"

namespace zt::cuda {

Stream::Stream(int priority) { ZT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority)); }

Stream::~Stream() { destroy(); }

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    destroy();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::destroy() noexcept {
  if (stream_) ZT_CUDA_WARN(cudaStreamDestroy(stream_));
  stream_ = nullptr;
}

void Stream::synchronize() const { ZT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

bool Stream::query() const {
  const cudaError_t err = cudaStreamQuery(stream_);
  if (err == cudaErrorNotReady) return false;
  ZT_CUDA_CHECK(err);
  return true;
}

void Stream::wait(const Event& event) const { ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0)); }

Event::Event(bool timing) {
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() { destroy(); }

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    destroy();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::destroy() noexcept {
  if (event_) ZT_CUDA_WARN(cudaEventDestroy(event_));
  event_ = nullptr;
}

void Event::record(cudaStream_t stream) { ZT_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { ZT_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  ZT_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.f;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace zt::cuda
