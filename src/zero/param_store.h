// Where stage 3 keeps this rank's 16-bit parameter slices when they leave the device
// (offload_param): every unit's owned slice, in one of two homes:
//   resident  one exact-size host allocation (page-locked for the GPU's copies unless
//             pin_memory is false), each slice at a 64-byte boundary;
//   swapped   (offload_param {device: nvme}) a block of this rank's swap file
//             <nvme_path>/zerotrain-<host>-<pid>/rank<r>-params.swp (zero/swap_file.h),
//             read into one of buffer_count buffers when used and written back when
//             modified (zero/param_swap.h).
// With NVMe the first units in forward order stay resident until max_in_cpu elements are
// used, the rest are swapped; without NVMe every unit is resident.
//
// Two threads use the store: the compute thread (the engine's gathers and prefetch,
// checkpoints) and the host optimizer's worker (it writes the updated parameters). Every
// use is bracketed: acquire() gives a host view of the slice, valid until release() (a
// resident slice is always its view). Overwrite means the caller writes every element, so
// nothing is read from the drive. A gather's device copy may still be reading the view when
// the engine releases it: release() then takes the copy's event, and the buffer is not
// reused until the copy is done (the compute stream never waits for the host).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda_api.h"
#include "core/tensor.h"
#include "zero/host_buffer.h"
#include "zero/optimizer.h"
#include "zero/options.h"
#include "zero/swap_file.h"

namespace zt::zero {

enum class ParamIntent { Read, Overwrite };
enum class ParamChange { Clean, Modified };

// What the store holds, for the log and the memory report.
struct ParamStoreLayout {
  size_t units = 0, resident_units = 0;
  int64_t resident_elements = 0, swapped_elements = 0;
  size_t resident_bytes = 0;     // the host allocation
  size_t swap_buffer_bytes = 0;  // all swap buffers together
  int swap_buffers = 0;
  uint64_t swap_file_bytes = 0;
  std::string swap_file;  // "" when nothing is swapped
  bool pinned = false;
};

class ParamSwap;

class ParamStore {
 public:
  // nvme: offload_param {device: nvme}'s settings (none: every slice resident). rank names
  // the swap file.
  ParamStore(Pinning pinning, std::optional<ParamNvme> nvme, int rank);
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Declares the units in forward order (keys 0, 1, ...), then layout_done() once: it
  // places them, allocates the memory and reserves the swap file (a full drive or an
  // unusable nvme_path is BadInput naming it, before training).
  void add_unit(int64_t numel, DType dtype);
  void layout_done();

  size_t units() const { return units_.size(); }
  bool resident(size_t unit) const { return units_.at(unit).resident; }
  // The resident slice itself, or the swapped one's shape and dtype without data.
  Tensor shape(size_t unit) const;

  // The unit's slice in host memory, valid until release(unit). Blocks while another
  // thread holds it and until it is read (Intent::Read) or its buffer is free to
  // overwrite (Intent::Overwrite: the caller writes every element).
  Tensor acquire(size_t unit, ParamIntent intent);
  // Modified: written back to the drive (asynchronously). reader: a device copy still
  // reading the view; the buffer is not reused before it is done.
  void release(size_t unit, ParamChange change, std::optional<cuda::CopyEvent> reader = std::nullopt);
  // The unit will be acquired soon: start reading it when a buffer is free without
  // waiting. False when declined (no buffer to spare) or not swapped.
  bool prefetch(size_t unit);
  // Every write-back on the drive (errors rethrown).
  void flush();

  // A swapped unit's slice for checkpoints (read and written through the buffers, so the
  // newest values are seen wherever they are); null for a resident one (use shape()).
  std::shared_ptr<SliceIo> slice_io(size_t unit);

  const ParamStoreLayout& layout() const { return layout_; }
  // The swap file's traffic (zeros when nothing is swapped).
  SwapTraffic traffic() const;
  io::IoEngine io_engine() const;

 private:
  struct Unit {
    int64_t numel = 0;
    DType dtype = DType::BF16;
    bool resident = true;
    size_t offset = 0;  // in the host allocation (resident)
  };
  Tensor resident_view(size_t unit) const;

  Pinning pinning_;
  std::optional<ParamNvme> nvme_;
  int rank_ = 0;
  std::vector<Unit> units_;
  HostBuffer resident_;
  std::unique_ptr<ParamSwap> swap_;
  ParamStoreLayout layout_;
  bool laid_out_ = false;
};

// One acquire/release pair (RAII): released Clean unless release() was called.
class ParamLease {
 public:
  ParamLease(ParamStore& store, size_t unit, ParamIntent intent)
      : store_(&store), unit_(unit), view_(store.acquire(unit, intent)) {}
  ~ParamLease();
  ParamLease(const ParamLease&) = delete;
  ParamLease& operator=(const ParamLease&) = delete;
  const Tensor& view() const { return view_; }
  void release(ParamChange change, std::optional<cuda::CopyEvent> reader = std::nullopt);

 private:
  ParamStore* store_;
  size_t unit_;
  Tensor view_;
};

}  // namespace zt::zero
