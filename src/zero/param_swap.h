// The swapped part of the parameter store (zero/param_store.h): each swapped unit's slice
// is one block of a swap file (zero/swap_file.h), brought into one of buffer_count host
// buffers (each the size of the largest block; page-locked for the GPU's copies when
// pinned, registered with io_uring) when a thread acquires it.
//
// A buffer holds at most one unit and a unit is in at most one buffer, so every thread
// sees the same, newest, values. A buffer is
//   Free     holding nothing;
//   Reading  its unit's block on the way in;
//   Ready    holding its unit, which may still be in flight out of it: a write-back to
//            the drive (`writing`) or a device copy (`reader`); it can be read meanwhile,
//            but overwritten or reused only after them;
//   InUse    acquired by one thread.
// One mutex guards the buffers' states; a thread that must wait for a transfer or a copy
// marks the buffer (`waited_on`), waits without the lock, and wakes the others through
// the condition variable. A buffer that must be reused is the least recently used one
// that needs no waiting, else the oldest whose write-back or copy is in flight, else a
// prefetch's read; when every buffer is acquired by the other thread, acquire waits for a
// release.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "backend/cuda_api.h"
#include "core/tensor.h"
#include "zero/host_buffer.h"
#include "zero/param_store.h"
#include "zero/swap_file.h"

namespace zt::zero {

class ParamSwap {
 public:
  ParamSwap(const ParamNvme& options, int rank, Pinning pinning);
  ~ParamSwap();  // waits for the transfers in flight; the swap file goes
  ParamSwap(const ParamSwap&) = delete;
  ParamSwap& operator=(const ParamSwap&) = delete;

  // Declares the unit's block (before layout_done); layout_done reserves the file and
  // makes buffer_count buffers of the largest block.
  void add(size_t unit, int64_t numel, DType dtype);
  void layout_done();

  Tensor acquire(size_t unit, ParamIntent intent);
  void release(size_t unit, ParamChange change, std::optional<cuda::CopyEvent> reader);
  bool prefetch(size_t unit);
  void flush();

  const std::string& path() const { return file_.path(); }
  io::IoEngine io_engine() const { return file_.io_engine(); }
  uint64_t file_bytes() const { return file_bytes_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  int buffer_count() const { return buffer_count_; }
  bool pinned() const { return pinning_ == Pinning::Pinned; }
  SwapTraffic traffic() const { return file_.traffic(); }

 private:
  struct Block {
    bool present = false;
    uint64_t offset = 0;  // in the swap file
    size_t bytes = 0;     // a multiple of the direct-I/O alignment
    int64_t numel = 0;
    DType dtype = DType::BF16;
  };
  enum class State { Free, Reading, Ready, InUse };
  struct Buffer {
    HostBuffer memory;
    State state = State::Free;
    size_t unit = 0;
    io::IoTicket read_ticket = 0, write_ticket = 0;
    bool writing = false;                   // a write-back of its memory in flight
    bool waited_on = false;                 // a thread waits (without the lock) for its read, write or reader
    std::optional<cuda::CopyEvent> reader;  // a device copy that may still read its memory
    uint64_t last_use = 0;
    std::thread::id owner;  // InUse: the thread that acquired it
  };
  using Lock = std::unique_lock<std::mutex>;

  const Block& block(size_t unit) const;
  Buffer* holding(size_t unit);
  // Nothing in flight in or out of it, and nobody waiting on it: free to overwrite.
  bool quiet(Buffer& b);
  // A buffer made Free for a new unit; null after waiting for one (the caller looks again).
  Buffer* claim(Lock& lock);
  // Waits, without the lock, for the buffer's read, else its write-back, else its reader.
  void wait_outside(Lock& lock, Buffer& b);
  void start_read(Buffer& b, size_t unit);
  void start_write(Buffer& b);
  Tensor view(Buffer& b);

  int buffer_count_;
  Pinning pinning_;
  SwapFile file_;
  std::vector<Block> blocks_;  // by unit
  std::vector<Buffer> buffers_;
  size_t buffer_bytes_ = 0;
  uint64_t file_bytes_ = 0, clock_ = 0;
  bool laid_out_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
};

}  // namespace zt::zero
