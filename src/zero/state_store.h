// Where a FlatOptimizer keeps each unit's state (the f32 master and the moments) between
// steps. The optimizer declares the state as pieces (a whole unit, or at most
// max_piece_elements() of it) and the store keys everything by piece. Two homes:
//   MemoryStore  every piece resident on its device (GPU, or host memory), one per unit;
//   NvmeStore    ZeRO-Infinity (offload_optimizer {device: nvme}): each piece (at most
//                sub_group_size elements) is a block of one swap file per rank under
//                nvme_path, read into one of buffer_count aligned buffers for its step and
//                written back after, through io/async_io.h (O_DIRECT, io_uring or a thread
//                pool). With pipeline_read the next piece's read overlaps this one's step;
//                with pipeline_write its write-back overlaps the next ones (DeepSpeed's
//                flags).
// The optimizer brackets every use of a piece with acquire()/release() (the `unit`
// arguments below are piece keys); checkpoints read and write swapped state from and to
// the swap file directly (slice_io), so a resume needs no swap folder and the checkpoint
// format is the same as without NVMe.
#pragma once
#include <cstddef>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/async_io.h"
#include "io/direct_file.h"
#include "zero/optimizer.h"
#include "zero/options.h"
#include "zero/swap_file.h"

namespace zt::zero {

// One unit's state: `states` buffers of `numel` elements of `dtype`, and an f32 master
// when `master`; all zero at first.
struct UnitStateShape {
  int64_t numel = 0;
  DType dtype = DType::F32;
  bool master = false;
  size_t states = 0;
  Device device = Device::cpu();
};

struct UnitStateViews {
  Tensor master;  // no data when the unit has no master
  std::vector<Tensor> state;
};

enum class StateAccess { Read, Modified };

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Declares each unit that has state (any order), then layout_done() once: a store that
  // needs room (the swap file on the drive) reserves it there, so a full drive fails
  // before training.
  virtual void add_unit(size_t unit, const UnitStateShape& shape) = 0;
  virtual void layout_done() {}
  // The unit's state, valid until release(unit); blocks until it is in memory.
  virtual UnitStateViews acquire(size_t unit) = 0;
  // Done with the unit; Modified: its state changed and must be kept.
  virtual void release(size_t unit, StateAccess access) = 0;
  // The unit will be acquired next: start bringing it in (NVMe with pipeline_read).
  virtual void prefetch(size_t /*unit*/) {}
  // Waits until every write-back is on the drive (NVMe; errors rethrown).
  virtual void flush() {}
  // Bytes of state the store keeps (in memory or on the drive) and of memory it holds.
  virtual size_t state_bytes() const = 0;
  virtual size_t memory_bytes() const = 0;
  // True when every unit's state is always in memory (state_slices are plain views).
  virtual bool resident() const = 0;
  // The most elements one declared piece may hold: a FlatOptimizer declares each unit's
  // state as pieces of at most this (DeepSpeed's sub_group_size) and steps them in turn.
  virtual int64_t max_piece_elements() const { return INT64_MAX; }
  // For a store that is not resident: the unit's master (-1) or state `which` for
  // checkpoints, read and written in place on the drive.
  virtual std::shared_ptr<SliceIo> slice_io(size_t unit, int which) = 0;
};

class MemoryStore final : public StateStore {
 public:
  void add_unit(size_t unit, const UnitStateShape& shape) override;
  UnitStateViews acquire(size_t unit) override;
  void release(size_t, StateAccess) override {}
  size_t state_bytes() const override { return bytes_; }
  size_t memory_bytes() const override { return bytes_; }
  bool resident() const override { return true; }
  std::shared_ptr<SliceIo> slice_io(size_t, int) override { return nullptr; }

 private:
  struct Unit {
    OwnedTensor master;
    std::vector<OwnedTensor> state;
  };
  std::vector<std::unique_ptr<Unit>> units_;
  size_t bytes_ = 0;
};

// offload_optimizer {device: nvme} as written (nvme_path: the folder, the swap folder is
// made inside it; buffer_count; pipeline_read/write), and what the run adds.
struct NvmeStoreOptions : OffloadOptimizerOptions {
  std::string label = "optimizer";
  int rank = 0;
  int64_t sub_group_size = 1000000000;  // elements per swapped piece
  io::AioOptions aio;
};

class NvmeStore final : public StateStore {
 public:
  // Creates <nvme_path>/zerotrain-<host>-<pid>/rank<r>-<label>[-<n>].swp (zero/swap_file.h:
  // removed by the destructor; stale folders of dead processes removed first). BadInput
  // naming the path when it cannot be made a writable folder.
  explicit NvmeStore(NvmeStoreOptions options);
  ~NvmeStore() override;
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  void add_unit(size_t unit, const UnitStateShape& shape) override;
  void layout_done() override { grow_buffers(buffer_bytes_); }
  UnitStateViews acquire(size_t unit) override;
  void release(size_t unit, StateAccess access) override;
  void prefetch(size_t unit) override;
  void flush() override;
  size_t state_bytes() const override { return file_bytes_; }
  size_t memory_bytes() const override;
  bool resident() const override { return false; }
  int64_t max_piece_elements() const override { return options_.sub_group_size; }
  std::shared_ptr<SliceIo> slice_io(size_t unit, int which) override;

  const std::string& swap_file() const { return file_.path(); }
  io::IoMode io_mode() const { return file_.io_mode(); }
  io::IoEngine io_engine() const { return file_.io_engine(); }
  // Bytes moved and seconds waited for the drive, since the store was made (the log's
  // I/O figures). Written by the thread that steps, read by the one that logs.
  using Traffic = SwapTraffic;
  Traffic traffic() const { return file_.traffic(); }

 private:
  struct Layout {
    uint64_t offset = 0;       // of the unit's block in the swap file
    size_t bytes = 0;          // the block, a multiple of the direct-I/O alignment
    UnitStateShape shape;
    size_t master_at = 0;      // byte offsets inside the block
    std::vector<size_t> state_at;
  };
  enum class Slot { Free, Reading, InUse, Clean, Writing };
  struct Buffer {
    io::AlignedBuffer memory;
    Slot slot = Slot::Free;
    size_t unit = 0;
    io::IoTicket ticket = 0;
    uint64_t last_use = 0;
  };
  friend class NvmeSliceIo;

  void grow_buffers(size_t bytes);
  Buffer* holding(size_t unit);
  Buffer& free_buffer();  // evicts the least recently used clean buffer (waiting for writes)
  void finish_io(Buffer& b);
  void start_read(Buffer& b, size_t unit);
  UnitStateViews views(const Buffer& b, size_t unit) const;
  // The swap file's bytes [offset, offset + bytes), synchronously (checkpoints).
  void read_range(uint64_t offset, size_t bytes, void* dst);
  void write_range(uint64_t offset, size_t bytes, const void* src);

  NvmeStoreOptions options_;
  SwapFile file_;
  std::vector<std::unique_ptr<Layout>> layout_;  // by unit; null: no state here
  std::vector<Buffer> buffers_;
  size_t buffer_bytes_ = 0;
  uint64_t file_bytes_ = 0, clock_ = 0;
  bool reserved_ = false;
};

}  // namespace zt::zero
