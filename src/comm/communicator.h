// Communicator: collectives and point-to-point messages among the ranks of a group.
// Implementations: SingleCommunicator (world size 1, no MPI), MpiCommunicator (host buffers
// over MPI), NcclCommunicator (device buffers, bootstrapped over MPI; nccl_communicator.h).
//
// Every operation is asynchronous underneath: the *_async calls start it and return a Work
// handle; the plain calls start it and wait. A wait polls until a deadline (the
// communicator's timeout, ZT_COLLECTIVE_TIMEOUT_S) so that a rank that never joins gives an
// error naming the operation and the rank instead of a silent hang. After such a timeout
// the communicator is not usable again: the caller aborts the job (comm::abort_job).
//
// Buffers are contiguous tensors (f32, bf16, f16, i32, i64) on the implementation's side:
// host memory for MPI, device memory for NCCL; every rank passes the same dtype and element
// counts. Buffers must stay alive and untouched until the Work
// completes.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace zt::comm {

enum class ReduceOp { Sum, Max };
const char* reduce_op_name(ReduceOp op);

using Seconds = std::chrono::duration<double>;

// A started operation. Destroying an unfinished Work waits for it (its buffers may still
// be read or written by the transport), up to the communicator's timeout.
class Work {
 public:
  virtual ~Work() = default;
  // Polls once; never blocks.
  virtual bool is_completed() = 0;
  // Waits up to the communicator's timeout; throws zt::Error naming the operation, the rank
  // and the elapsed time when it expires.
  void wait() { wait(default_timeout()); }
  virtual void wait(Seconds timeout) = 0;

 protected:
  virtual Seconds default_timeout() const = 0;
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  // split(): the color of a rank that belongs to no new group.
  static constexpr int kNoColor = -1;

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Seconds timeout() const = 0;
  // "mpi", "single": for logs and error messages.
  virtual std::string backend_name() const = 0;

  // In place: every rank ends with the elementwise reduction over all ranks. bf16/f16 are
  // reduced through f32 in each pairwise step (the result is rounded once per step).
  virtual WorkPtr all_reduce_async(const Tensor& buffer, ReduceOp op) = 0;
  // input has size()*n elements; rank r gets the sum of every rank's [r*n, (r+1)*n) slice.
  virtual WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output) = 0;
  // input has n elements, output size()*n: rank r's input lands in [r*n, (r+1)*n) of every
  // output. input may be exactly that slice of output (in place, as ZeRO gathers).
  virtual WorkPtr all_gather_async(const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr broadcast_async(const Tensor& buffer, int root) = 0;
  // Variable splits (MoE token dispatch: the counts come from the router and change every
  // step). input holds send_counts[p] elements for each peer p, in rank order; output gets
  // recv_counts[p] elements from each peer p, in rank order (offsets are the prefix sums).
  // Counts are elements, one per rank of the group; they must sum to input's and output's
  // numel, and recv_counts[p] here must equal send_counts[rank()] on peer p (exchange the
  // counts first, e.g. with an all_gather, when only the senders know them). input and
  // output are 1-D-contiguous buffers of one dtype that do not overlap.
  virtual WorkPtr all_to_all_v_async(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts) = 0;
  virtual WorkPtr send_async(const Tensor& buffer, int peer, int tag) = 0;
  // Receives exactly buffer.numel() elements; a message of another size is an error.
  virtual WorkPtr recv_async(const Tensor& buffer, int peer, int tag) = 0;
  virtual WorkPtr barrier_async() = 0;

  // Sub-groups (data/tensor/pipeline parallel): ranks with the same color form a group,
  // ordered by key (ties by rank). Collective over this communicator. Returns nullptr on a
  // rank whose color is kNoColor.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Blocking forms: start and wait with timeout().
  void all_reduce(const Tensor& buffer, ReduceOp op) { all_reduce_async(buffer, op)->wait(); }
  void reduce_scatter(const Tensor& input, const Tensor& output) { reduce_scatter_async(input, output)->wait(); }
  void all_gather(const Tensor& input, const Tensor& output) { all_gather_async(input, output)->wait(); }
  void broadcast(const Tensor& buffer, int root) { broadcast_async(buffer, root)->wait(); }
  void all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& recv_counts) {
    all_to_all_v_async(input, output, send_counts, recv_counts)->wait();
  }
  void send(const Tensor& buffer, int peer, int tag) { send_async(buffer, peer, tag)->wait(); }
  void recv(const Tensor& buffer, int peer, int tag) { recv_async(buffer, peer, tag)->wait(); }
  void barrier() { barrier_async()->wait(); }
};

// Scalar agreements among the ranks (blocking; no communication with one rank):
// whether `flag` is true on any rank, and the sum of a double over the ranks (sent as f32
// high and low parts, which keep ~48 bits, so every rank gets the same value).
bool any_rank(Communicator& comm, bool flag);
double sum_over_ranks(Communicator& comm, double value);

// Argument checks shared by the implementations: each throws zt::Error naming the
// operation and what to change.
void check_buffer(const char* op, const Tensor& t);             // host, contiguous, supported dtype
void check_buffer_any_device(const char* op, const Tensor& t);  // the same on any device
// Host: the buffers must be host memory (MPI); Any: any one device (the single-process
// communicator copies device buffers too).
enum class BufferPlace { Host, Any };
void check_reduce_scatter(const Tensor& input, const Tensor& output, int size, BufferPlace place = BufferPlace::Host);
void check_all_gather(const Tensor& input, const Tensor& output, int size, BufferPlace place = BufferPlace::Host);
void check_peer(const char* op, int peer, int size);
// all_to_all_v: the buffers (as check_buffer / check_buffer_any_device for place), then
// check_all_to_all_v_layout.
void check_all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                        const std::vector<int64_t>& recv_counts, int size, BufferPlace place = BufferPlace::Host);
// The part every transport shares (the NCCL one checks its device buffers itself): one dtype,
// a count per rank, none negative, the sums equal to the numels, no overlap.
void check_all_to_all_v_layout(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                               const std::vector<int64_t>& recv_counts, int size);

// Whether input is exactly output's slice for `rank` (an in-place all_gather).
bool is_gather_slice(const Tensor& input, const Tensor& output, int rank);

// A Work that is already done (the single-process communicator, empty buffers).
class CompletedWork final : public Work {
 public:
  bool is_completed() override { return true; }
  void wait(Seconds) override {}

 protected:
  Seconds default_timeout() const override { return Seconds(0); }
};

}  // namespace zt::comm
