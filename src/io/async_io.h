// Asynchronous reads and writes for NVMe offload (DeepSpeed's aio handle): a transfer is
// split into block_size pieces, up to queue_depth x thread_count of them in flight, and
// returns a ticket at once; wait(ticket) blocks until its pieces are done. Two engines:
//   io_uring  (liburing, when built with it and the kernel allows it): one ring, pieces
//             submitted in batches (or one by one: single_submit), completions reaped
//             while submitting (overlap_events); buffers registered with
//             register_buffer() go through the ring's fixed-buffer opcodes, so the kernel
//             does not pin and map their pages on every transfer;
//   threads   a pool of queue_depth x thread_count threads doing pread/pwrite (the GPU
//             machine has no liburing).
// Files are DirectFiles: with O_DIRECT, buffers, offsets and lengths must be multiples of
// kDirectAlignment (checked at submission). One thread drives an AsyncIo (the swapper's);
// the work itself proceeds in the kernel or the pool meanwhile.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "io/direct_file.h"

namespace zt::io {

enum class IoEngine { Auto, Uring, Threads };

// The ds_config "aio" section's meaning (DeepSpeed's defaults).
struct AioOptions {
  size_t block_size = 1 << 20;  // bytes per piece
  int queue_depth = 8;          // pieces in flight per thread
  int thread_count = 1;         // aio.thread_count / intra_op_parallelism
  bool single_submit = false;   // submit each piece on its own instead of in batches
  bool overlap_events = true;   // reap completions between submissions
  IoEngine engine = IoEngine::Auto;
};

using IoTicket = uint64_t;

// Whether this build has io_uring and the kernel lets this process set up a ring
// (containers often forbid it); `why` says what is missing.
bool uring_usable(std::string* why = nullptr);
const char* io_engine_name(IoEngine e);

class AsyncIo {
 public:
  // Auto picks io_uring when usable, else threads; Uring when unusable is Unsupported.
  explicit AsyncIo(const AioOptions& options);
  ~AsyncIo();  // waits for every transfer in flight (errors dropped)
  AsyncIo(const AsyncIo&) = delete;
  AsyncIo& operator=(const AsyncIo&) = delete;

  IoTicket read(const DirectFile& file, void* buffer, size_t bytes, uint64_t offset);
  IoTicket write(const DirectFile& file, const void* buffer, size_t bytes, uint64_t offset);
  // Blocks until the ticket's transfer is complete; an Io error naming the file, offset
  // and cause when a piece failed or ended early.
  void wait(IoTicket ticket);
  void wait_all();
  // Buffers transfers will use (kept registered until the AsyncIo goes; io_uring only).
  // Returns false when the kernel refused (RLIMIT_MEMLOCK): transfers still work.
  bool register_buffer(void* data, size_t bytes);

  IoEngine engine() const;
  const AioOptions& options() const;

  class Engine;

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace zt::io
