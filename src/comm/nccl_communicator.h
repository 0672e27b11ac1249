// Communicator over NCCL for device buffers: contiguous Device::cuda tensors on this
// process's GPU (the one zt::cuda::init selected), dtypes f32, bf16, f16, i32, i64. Host
// buffers are an Unsupported error here (they go through MpiCommunicator).
// No NCCL or CUDA types in this header; it links only in a build with ZT_WITH_NCCL
// (comm/world.h's make_nccl_world_communicator() is the entry point for every build).
//
// Bootstrap: create() is collective over a host communicator (MPI, or the single-process
// one): its rank 0 makes the ncclUniqueId and broadcasts it over that communicator as a host
// i32 buffer, then every rank joins with its rank and size there. World size 1 needs no MPI.
// split() is ncclCommSplit: sub-groups (dp/tp/pp) need no further bootstrap.
//
// Streams and ordering. Each communicator owns a CUDA stream (the comm stream). Every
// operation
//   1. records an event on the compute stream (backend/cuda/context.h) and makes the comm
//      stream wait for it: the operation sees everything queued on the compute stream before
//      the call (e.g. the kernel that wrote the gradients);
//   2. enqueues the NCCL call on the comm stream;
//   3. records a completion event on the comm stream, which the Work holds.
// The host does not wait for the GPU in the *_async calls, except while NCCL itself is still
// setting up the call (the first operation of a communicator connects to its peers); that
// setup is bounded by the timeout too.
//
// Work (see communicator.h):
//   is_completed()  one cudaEventQuery of the completion event (and NCCL's async error state).
//   wait(timeout)   blocks the HOST: polls the completion event and ncclCommGetAsyncError
//                   until the operation is done on the GPU; afterwards anything later queued
//                   on any stream sees the result. On expiry (or an asynchronous NCCL error)
//                   it calls ncclCommAbort and throws zt::Error naming the operation, the rank
//                   and the elapsed time: that is the hang protection. The communicator is
//                   unusable after that (every call throws that error): abort the job.
//   destroying an unfinished Work waits for it like wait() (a failure is logged), unless
//                   order_before_compute() was called for it.
// NcclCommunicator::order_before_compute(work) is the non-blocking alternative: it makes the
// compute stream wait for the operation's completion event (cudaStreamWaitEvent), so that
// kernels queued on the compute stream afterwards see its result while the host runs ahead
// (ZeRO-3 prefetch). Buffers stay valid as the device allocator frees memory in compute-stream
// order. A hang is then found by the next host wait (synchronize, a copy to the host) only.
//
// Point-to-point: NCCL has no tags and a lone ncclRecv blocks the GPU until its matching send
// runs, so send_async/recv_async are not launched at once: the ones issued back to back are
// launched together in one ncclGroupStart/End at the next wait, is_completed,
// order_before_compute, or other operation on this communicator. Post every send and receive
// of an exchange (a ring, a pipeline step) before waiting on any of them. Messages between a
// pair of ranks match in the order they were posted; tags are only checked to be >= 0, and a
// receive of another size than its send is not detected (NCCL cannot tell): keep counts and
// dtypes equal on both sides.
//
// Reductions: NCCL's sum/max; bf16/f16 are reduced in f32 inside each step and rounded once per
// step, as the MPI path (the order of the steps is NCCL's ring or tree, so with more than two
// ranks rounding may differ from MPI's for inexact values).
//
// Threads: one thread per communicator (the one that made it or any single thread at a time).
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace zt::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (a host communicator: MPI or single), which is used only here.
  // Needs zt::cuda::init() first (the GPU of this rank). The timeout defaults to
  // ZT_COLLECTIVE_TIMEOUT_S (else 300 s) and also bounds NCCL's initialisation.
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap);
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap, Seconds timeout);
  // Flushes and releases the NCCL communicator (ncclCommFinalize, bounded by the timeout, then
  // ncclCommDestroy; ncclCommAbort when finalizing times out). Outstanding Works keep the
  // NCCL communicator alive until they are destroyed.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Seconds timeout() const override;
  // For operations started from now on (and groups split from now on).
  void set_timeout(Seconds timeout);
  std::string backend_name() const override { return "nccl"; }
  // The CUDA device index of this communicator's GPU.
  int device() const;

  WorkPtr all_reduce_async(const Tensor& buffer, ReduceOp op) override;
  WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output) override;
  WorkPtr all_gather_async(const Tensor& input, const Tensor& output) override;
  WorkPtr broadcast_async(const Tensor& buffer, int root) override;
  // One ncclSend/ncclRecv per peer with a non-zero count, in one ncclGroupStart/End on the
  // comm stream (launched at once, like the other collectives; pending sends/receives go
  // first). A rank that sends and receives nothing returns a completed Work without calling
  // NCCL: its peers have nothing to exchange with it either.
  WorkPtr all_to_all_v_async(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts) override;
  WorkPtr send_async(const Tensor& buffer, int peer, int tag) override;
  WorkPtr recv_async(const Tensor& buffer, int peer, int tag) override;
  // An all_reduce of one device element: complete when every rank has reached it.
  WorkPtr barrier_async() override;
  // ncclCommSplit; collective over this communicator; kNoColor returns nullptr. The group
  // inherits the timeout and gets its own comm stream.
  std::unique_ptr<Communicator> split(int color, int key) override;

  // Makes the compute stream wait for `work` without blocking the host (see above). A Work of
  // another communicator (already done on the host side, e.g. CompletedWork) is waited for.
  // Throws what wait() throws if the communicator has failed.
  static void order_before_compute(Work& work);

  struct Impl;  // holds the ncclComm_t and the comm stream; defined in nccl_communicator.cpp

 private:
  explicit NcclCommunicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace zt::comm
