// Communicator for device buffers that stages them through host memory and moves the host
// copies over a host communicator (MPI): for several ranks on ONE GPU, which NCCL refuses
// (it needs a device per rank). Its purpose is testing and debugging the multi-rank device
// paths (ZeRO 1-3 with device buffers) on a machine with one GPU; it is slower than NCCL
// (every operation crosses PCIe twice and the host reduces). comm/world.h's
// make_device_world_communicator() picks it when two ranks share a device, or when
// ZT_DEVICE_COMM=staged asks.
//
// Every operation
//   1. queues the copy device -> host (pinned memory) on the staging's copy stream, ordered
//      after the work queued on the compute stream so far (the kernel that wrote the
//      gradients), and waits on the host until it has landed;
//   2. starts the host communicator's operation on the host copy (MpiCommunicator: MPI_I*),
//      at the call, as the MPI communicator starts its own: a start left to a later poll
//      could leave a peer waiting while this rank blocks in another communicator's
//      collective, and each rank starts its operations in call order, as MPI requires;
//   3. once the host operation is done, queues the copy host -> device on the copy stream;
//   4. once that has landed, makes the compute stream wait for it; the Work is done.
// Steps 3 and 4 advance whenever the Work is polled (is_completed, wait), so a caller that
// polls while it computes (ZeroEngine) overlaps them with compute. Step 1 costs a host wait
// for the compute stream at every call: this communicator serializes the host with the GPU
// at each collective.
//
// Results are exactly the host communicator's on the same bytes: the reduction is its own
// (MpiCommunicator: MPI's reduction order; bf16/f16 summed through f32 in each pairwise step
// and rounded once per step, comm/mpi_runtime.cpp), so a staged all_reduce equals an MPI
// all_reduce of the same host data bit for bit.
//
// Work (communicator.h): wait(timeout) polls the steps until done and throws zt::Error naming
// the operation, the step it was in and the rank after the timeout (a call whose copy out
// never lands throws the same from the call, after the communicator's timeout); after that
// the communicator refuses further operations (abort the job). Destroying an unfinished Work
// waits for it (its device buffers may still be written).
//
// The staging copies are pluggable (Staging below): cuda_staging() uses the CUDA copy stream
// and a pool of pinned host blocks; host_staging() takes host tensors and copies with memcpy,
// so that everything but the CUDA calls is tested on CPU ranks.
//
// Threads: one thread per communicator at a time, as the others.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"

namespace zt::comm {

// A copy queued by a Staging: done() polls (never blocks); order_compute_after() makes the
// compute stream's later work wait for it (no host wait; nothing to do on the host stand-in).
class StagingEvent {
 public:
  virtual ~StagingEvent() = default;
  virtual bool done() = 0;
  virtual void order_compute_after() = 0;
};

// Host memory for one operation's staged copy; returned to its Staging when destroyed.
using HostBlock = std::shared_ptr<void>;

class Staging {
 public:
  virtual ~Staging() = default;
  // The device whose buffers this stages (cuda:N; cpu for the host stand-in).
  virtual Device device() const = 0;
  // "pinned host memory": for the log line.
  virtual std::string describe() const = 0;
  // At least `bytes` of host memory (pinned for a GPU). Valid while the block lives.
  virtual HostBlock host_block(size_t bytes) = 0;
  // Queues device -> host after the compute stream's work queued so far. bytes may be 0
  // (the event then marks only that point of the compute stream).
  virtual std::unique_ptr<StagingEvent> to_host(void* host, const void* device, size_t bytes) = 0;
  // Queues host -> device after the copies queued before it.
  virtual std::unique_ptr<StagingEvent> to_device(void* device, const void* host, size_t bytes) = 0;
};

// Host tensors staged with memcpy (done at once): the CPU stand-in for tests.
std::shared_ptr<Staging> host_staging();
// The CUDA copy stream (cuda::CopyStream) and pinned host blocks reused by size class, for
// buffers on the current GPU. Needs zt::cuda::init(); Unsupported in a CPU-only build.
std::shared_ptr<Staging> cuda_staging();

class StagedDeviceCommunicator final : public Communicator {
 public:
  // A communicator of its own over `host` (split from it, collective over it: its messages
  // never mix with host's), staging buffers of staging->device(). host is MPI, or the
  // single-process communicator for one rank.
  static std::unique_ptr<StagedDeviceCommunicator> create(Communicator& host, std::shared_ptr<Staging> staging);
  ~StagedDeviceCommunicator() override;
  StagedDeviceCommunicator(const StagedDeviceCommunicator&) = delete;
  StagedDeviceCommunicator& operator=(const StagedDeviceCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Seconds timeout() const override;
  // "staged(mpi)": the host transport in brackets.
  std::string backend_name() const override;
  const Staging& staging() const;

  WorkPtr all_reduce_async(const Tensor& buffer, ReduceOp op) override;
  WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output) override;
  // In place or not: the input goes to its slice of a host copy of the output, which is
  // gathered in place and copied back whole.
  WorkPtr all_gather_async(const Tensor& input, const Tensor& output) override;
  // Only the root copies to the host, only the others copy back.
  WorkPtr broadcast_async(const Tensor& buffer, int root) override;
  WorkPtr all_to_all_v_async(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts) override;
  WorkPtr send_async(const Tensor& buffer, int peer, int tag) override;
  WorkPtr recv_async(const Tensor& buffer, int peer, int tag) override;
  // Done when every rank has reached it and the compute queued before it here has finished.
  WorkPtr barrier_async() override;
  // The host communicator's split; the group shares this one's staging.
  std::unique_ptr<Communicator> split(int color, int key) override;

  struct Impl;  // the host communicator, the staging, the timeout and the failure if any

 private:
  explicit StagedDeviceCommunicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace zt::comm
