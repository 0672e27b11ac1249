// RAII wrappers for CUDA streams and events (move-only). Streams are created non-blocking
// (no implicit synchronization with the legacy default stream): order work across streams
// with events, e.g.
//   Event ready; ready.record(comm); compute.wait(ready);
#pragma once
#include <cuda_runtime.h>

namespace zt::cuda {

class Event;

class Stream {
 public:
  // priority: lower numbers are higher priority (see cudaDeviceGetStreamPriorityRange).
  explicit Stream(int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }  // NOLINT: pass directly to CUDA calls
  void synchronize() const;
  // True when all work queued so far has finished.
  bool query() const;
  // Later work on this stream waits for the event's recorded work.
  void wait(const Event& event) const;

 private:
  void destroy() noexcept;
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  // Events without timing are cheaper; elapsed_ms needs timing events on both ends.
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  void synchronize() const;
  bool query() const;
  // Milliseconds between two recorded timing events (start recorded before end).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  void destroy() noexcept;
  cudaEvent_t event_ = nullptr;
};

}  // namespace zt::cuda
