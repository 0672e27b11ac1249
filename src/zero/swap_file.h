// One swap file of ZeRO-Infinity's NVMe offload, shared by the optimizer state's store
// (zero/state_store.h, NvmeStore) and the stage-3 parameter store (zero/param_store.h):
// the per-process swap folder <nvme_path>/zerotrain-<host>-<pid>/ (made at start, after
// removing the folders of dead zerotrain processes of this host; removed with the last
// file in it), the file rank<r>-<label>[-<n>].swp opened for direct I/O, its reservation
// on the drive, asynchronous transfers through io/async_io.h and the traffic counters the
// step line reports.
//
// Thread safety: transfers may be started and waited for from several threads (the
// parameter store is used by the compute thread and the host step's worker). The thread
// pool engine takes that as is; io_uring's ring is driven by one thread at a time, so its
// calls are serialised here (a wait then holds up another thread's submission until that
// transfer is done, never longer). Callers must not hold their own locks while waiting.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/async_io.h"
#include "io/direct_file.h"

namespace zt::zero {

// Bytes moved and seconds waited for the drive since a swap file was made (the log's
// I/O figures).
struct SwapTraffic {
  uint64_t read_bytes = 0, written_bytes = 0;
  double read_wait_s = 0, write_wait_s = 0;
  SwapTraffic& operator+=(const SwapTraffic& o) {
    read_bytes += o.read_bytes;
    written_bytes += o.written_bytes;
    read_wait_s += o.read_wait_s;
    write_wait_s += o.write_wait_s;
    return *this;
  }
};

struct SwapFileOptions {
  std::string nvme_path;  // the folder; the swap folder is made inside it
  std::string label;      // "optimizer", "params": the file's name
  int rank = 0;
  io::AioOptions aio;
};

enum class IoDirection { Read, Write };

class SwapFile {
 public:
  // Creates the swap folder and file (nvme_path itself when missing). BadInput naming the
  // path when it cannot be made a writable folder or the file cannot be opened.
  explicit SwapFile(const SwapFileOptions& options);
  ~SwapFile();  // waits for every transfer, removes the file (and the folder with the last store)
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::string& path() const { return path_; }
  io::IoMode io_mode() const { return file_.mode(); }
  io::IoEngine io_engine() const { return aio_->engine(); }

  // Room for `bytes` on the drive (a full drive is BadInput now, not mid-step). A
  // reserved file reads as zeros.
  void reserve(uint64_t bytes);
  // Buffers the transfers will use (io_uring's fixed buffers; false when refused).
  bool register_buffer(void* data, size_t bytes);

  // Asynchronous whole-block transfers (aligned for O_DIRECT), counted as traffic.
  io::IoTicket read(void* buffer, size_t bytes, uint64_t offset);
  io::IoTicket write(const void* buffer, size_t bytes, uint64_t offset);
  // Blocks until the ticket's transfer is done (an Io error when it failed); the time is
  // counted as waiting for reads or writes.
  void wait(io::IoTicket ticket, IoDirection direction);
  // Waits for every transfer in flight, dropping their errors (an owner's destructor,
  // before its buffers go).
  void drain() noexcept;

  // Synchronous transfers of any byte range (checkpoints), through an aligned bounce
  // buffer of the whole blocks around it.
  void read_range(uint64_t offset, size_t bytes, void* dst);
  void write_range(uint64_t offset, size_t bytes, const void* src);

  SwapTraffic traffic() const;

 private:
  struct Bounce;
  Bounce read_blocks(uint64_t offset, size_t bytes);
  // io_uring's calls one thread at a time (see above); empty for the thread pool.
  std::unique_lock<std::mutex> io_lock();
  void release_folder() noexcept;

  std::string folder_, path_;
  io::DirectFile file_;
  std::unique_ptr<io::AsyncIo> aio_;
  std::mutex io_mutex_;
  std::atomic<uint64_t> read_bytes_{0}, written_bytes_{0};
  std::atomic<double> read_wait_s_{0}, write_wait_s_{0};
};

// The swap folders (zerotrain-<host>-<pid>, carrying zerotrain's marker naming that pid:
// io/output_file.h) of processes of this host that are gone, removed; their paths. A
// folder of that name without the marker is not ours and stays. Run by SwapFile at start; exposed for the tests.
std::vector<std::string> remove_stale_swap_folders(const std::string& nvme_path);

}  // namespace zt::zero
