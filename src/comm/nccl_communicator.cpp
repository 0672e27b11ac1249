// NcclCommunicator (see nccl_communicator.h). Every NCCL communicator here is nonblocking
// (ncclConfig_t::blocking = 0): NCCL calls return at once, possibly with ncclInProgress while
// NCCL finishes them on its own threads (initialisation, split, the connection set-up of a
// first operation), and ncclCommGetAsyncError says when they are done or have failed. That
// lets every wait here poll against a deadline and end with ncclCommAbort instead of hanging.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/stream.h"
#include "backend/cuda_api.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/log.h"
#include "comm/env.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error \
    "zerotrain needs NCCL >= 2.18 (ncclCommSplit, nonblocking communicators); install a newer NCCL or configure with -DZT_WITH_NCCL=OFF"
#endif

namespace zt::comm {

namespace {

using Clock = std::chrono::steady_clock;

// Calls ready() until it returns true; false when `timeout` passes first (elapsed set either
// way). Spins briefly, then backs off to short sleeps: with more ranks than cores, spinning
// ranks would starve the ones they wait for.
template <class Ready>
bool poll_until(Seconds timeout, Seconds& elapsed, Ready&& ready) {
  const auto start = Clock::now();
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    if (ready()) {
      elapsed = Clock::now() - start;
      return true;
    }
    elapsed = Clock::now() - start;
    if (elapsed > timeout) return false;
    if (polls > 64) {
      pause = std::min(std::chrono::microseconds(200), pause + std::chrono::microseconds(10));
      std::this_thread::sleep_for(pause);
    }
  }
}

std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  std::string message = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') message += str(" (", last, ")");
  return message;
}

// For calls that must succeed at once (no communicator state involved).
[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, const char* file, int line) {
  throw Error(ErrorKind::Internal, str(call, " failed: ", nccl_message(result, nullptr), " [", file, ":", line,
                                       "]; set NCCL_DEBUG=WARN (or INFO) for NCCL's own log"));
}

#define ZT_NCCL_CHECK(call)                                                                           \
  do {                                                                                                \
    const ncclResult_t zt_nccl_result_ = (call);                                                      \
    if (zt_nccl_result_ != ncclSuccess) throw_nccl_error(zt_nccl_result_, #call, __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::F8E4M3:
    case DType::F8E5M2:
      break;  // ncclUint8 would let a reduction add codes: communicate fp8 as bf16 or f32
  }
  ZT_THROW_UNSUPPORTED("the NCCL communicator has no datatype for dtype ", dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Max:
      return ncclMax;
  }
  ZT_THROW_UNSUPPORTED("the NCCL communicator has no reduction ", reduce_op_name(op));
}

std::string describe(const char* op, const Tensor& t) {
  return str(op, "(", dtype_name(t.dtype()), ", ", t.numel(), " elements)");
}

// The device-buffer counterpart of check_buffer (communicator.h): a contiguous tensor on this
// communicator's GPU.
void check_device_buffer(const char* op, const Tensor& t, int device) {
  if (!t.device().is_cuda()) {
    ZT_THROW_UNSUPPORTED(op, ": tensor '", t.name(), "' is on ", t.device().name(),
                         "; the NCCL communicator moves device buffers only (host buffers need "
                         "the MPI communicator, or copy to the GPU first)");
  }
  if (t.device().index != device) {
    ZT_THROW_INPUT(op, ": tensor '", t.name(), "' is on ", t.device().name(),
                   " but this rank's NCCL communicator uses cuda:", device,
                   "; allocate it on Device::cuda(zt::cuda::current_device())");
  }
  ZT_CHECK(t.defined(), op, ": tensor '", t.name(), "' has no data");
  ZT_CHECK(t.is_contiguous(), op, ": tensor '", t.name(), "' of shape ", shape_str(t.shape()),
           " is not contiguous; pass a contiguous view (flat unit slices are)");
  nccl_type(t.dtype());
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

int world_rank_or(int fallback) {
  try {
    return read_launch_env().rank;
  } catch (const std::exception&) {
    return fallback;
  }
}

// What a started operation's Work waits on: its completion event on the comm stream, set when
// the NCCL call is enqueued (for send/recv: when the pending batch is launched).
struct Launch {
  std::string what;
  std::shared_ptr<cuda::Event> done;
};

// A send or receive posted but not launched yet (see "Point-to-point" in the header).
struct PendingP2p {
  bool send = false;
  void* data = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  int peer = 0;
  std::shared_ptr<Launch> launch;
};

}  // namespace

struct NcclCommunicator::Impl {
  Impl(int device_index, int world, Seconds t) : device(device_index), world_rank(world), timeout(t) {
    barrier_scratch = Buffer(sizeof(float), Device::cuda(device));
    barrier_scratch.zero();
  }
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ncclComm_t comm = nullptr;
  int rank = 0;
  int size = 1;
  int device = 0;
  int world_rank = 0;
  Seconds timeout;
  std::string failure;  // why the communicator was aborted; empty while it is usable
  cuda::Stream stream;  // the comm stream (on the device current at construction)
  cuda::Event ready;    // reused: "the compute stream got this far", waited for by `stream`
  Buffer barrier_scratch;
  std::vector<PendingP2p> pending;

  std::string where() const {
    return str("rank ", rank, " of ", size, " (world rank ", world_rank, ", cuda:", device, ")");
  }

  void check_usable(const std::string& what) const {
    if (!failure.empty()) {
      throw Error(ErrorKind::Internal,
                  str(what, " on ", where(), ": this NCCL communicator was aborted earlier: ", failure));
    }
  }

  // Ends the NCCL communicator (kernels still running on it quit) and remembers why.
  void abort(const std::string& why) {
    if (failure.empty()) failure = why;
    pending.clear();
    if (comm != nullptr) {
      const ncclResult_t r = ncclCommAbort(comm);
      if (r != ncclSuccess && r != ncclInProgress) {
        ZT_WARN("ncclCommAbort on ", where(), ": ", ncclGetErrorString(r));
      }
      comm = nullptr;
    }
  }

  [[noreturn]] void fail(const std::string& message) {
    abort(message);
    throw Error(ErrorKind::Internal, message);
  }

  // One look at NCCL's state of the communicator: true while a call is still in progress;
  // an asynchronous error (a peer failed, a network error) aborts and throws.
  bool in_progress(const std::string& what) {
    check_usable(what);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclInProgress) return true;
    if (state != ncclSuccess) {
      fail(str(what, " failed on ", where(), ": NCCL reports ", nccl_message(state, comm),
               "; the NCCL communicator was aborted. See the other ranks' logs (NCCL_DEBUG=WARN "
               "for NCCL's own) and abort the job"));
    }
    return false;
  }

  [[noreturn]] void fail_timeout(const std::string& what, Seconds elapsed, Seconds limit) {
    fail(str(what, " timed out on ", where(), " after ", elapsed.count(), " s (timeout ", limit.count(),
             " s, ZT_COLLECTIVE_TIMEOUT_S): not every rank of the group reached it — one "
             "failed, is stuck, or the ranks called collectives in different orders; the NCCL "
             "communicator was aborted (ncclCommAbort). See the other ranks' logs and abort the "
             "job"));
  }

  // After an NCCL call that may return ncclInProgress: waits (up to the timeout) until NCCL
  // has finished it on the host side (for an operation: enqueued it on the stream).
  void settle(ncclResult_t started, const char* call, const std::string& what) {
    if (started != ncclSuccess && started != ncclInProgress) {
      fail(str(what, ": ", call, " failed on ", where(), ": ", nccl_message(started, comm),
               "; the NCCL communicator was aborted (NCCL_DEBUG=WARN shows NCCL's own log)"));
    }
    Seconds elapsed{};
    if (!poll_until(timeout, elapsed, [&] { return !in_progress(what); })) {
      fail_timeout(what, elapsed, timeout);
    }
  }

  // The comm stream waits for everything queued on the compute stream so far.
  void order_after_compute() {
    ready.record(cuda::compute_stream());
    stream.wait(ready);
  }

  // Launches the pending sends and receives together, in one NCCL group.
  void flush() {
    if (pending.empty()) return;
    std::vector<PendingP2p> batch;
    batch.swap(pending);
    const std::string what = batch.size() == 1
                                 ? batch.front().launch->what
                                 : str(batch.size(), " sends/receives (first: ", batch.front().launch->what, ")");
    ZT_NCCL_CHECK(ncclGroupStart());
    ncclResult_t first_error = ncclSuccess;
    const char* failed_call = "";
    for (const PendingP2p& p : batch) {
      const ncclResult_t r = p.send ? ncclSend(p.data, p.count, p.type, p.peer, comm, stream)
                                    : ncclRecv(p.data, p.count, p.type, p.peer, comm, stream);
      if (r != ncclSuccess && r != ncclInProgress && first_error == ncclSuccess) {
        first_error = r;
        failed_call = p.send ? "ncclSend" : "ncclRecv";
      }
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (first_error != ncclSuccess) settle(first_error, failed_call, what);
    settle(ended, "ncclGroupEnd", what);
    auto done = std::make_shared<cuda::Event>();
    done->record(stream);
    for (PendingP2p& p : batch) p.launch->done = done;
  }
};

NcclCommunicator::Impl::~Impl() {
  if (comm == nullptr) return;
  // Works hold the Impl: nothing can still be pending or running on the host side here.
  try {
    const std::string what = "destroying the NCCL communicator";
    ZT_CUDA_WARN(cudaSetDevice(device));
    settle(ncclCommFinalize(comm), "ncclCommFinalize", what);
    const ncclResult_t r = ncclCommDestroy(comm);
    comm = nullptr;
    if (r != ncclSuccess) ZT_WARN("ncclCommDestroy on ", where(), ": ", ncclGetErrorString(r));
  } catch (const std::exception& e) {
    // settle() aborted the communicator already.
    ZT_WARN(e.what());
  }
}

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::Impl> impl, std::shared_ptr<Launch> launch)
      : impl_(std::move(impl)), launch_(std::move(launch)), timeout_(impl_->timeout) {}

  ~NcclWork() override {
    if (done_ || ordered_ || !impl_->failure.empty()) return;
    try {
      wait(timeout_);
    } catch (const std::exception& e) {
      // A destructor cannot throw; the communicator is aborted and the job must end.
      ZT_WARN("unfinished ", launch_->what, " dropped: ", e.what());
    }
  }

  bool is_completed() override {
    if (done_) return true;
    launch();
    return poll();
  }

  void wait(Seconds timeout) override {
    if (done_) return;
    launch();
    Seconds elapsed{};
    if (!poll_until(timeout, elapsed, [&] { return poll(); })) {
      impl_->fail_timeout(launch_->what, elapsed, timeout);
    }
  }

  void order_before_compute() {
    if (done_) return;
    launch();
    impl_->check_usable(launch_->what);
    ZT_CUDA_CHECK(cudaStreamWaitEvent(cuda::compute_stream(), launch_->done->get(), 0));
    ordered_ = true;
  }

 protected:
  Seconds default_timeout() const override { return timeout_; }

 private:
  // Send/recv are posted lazily: launch the batch this one is in.
  void launch() {
    if (launch_->done) return;
    impl_->check_usable(launch_->what);
    impl_->flush();
    ZT_CHECK(launch_->done, launch_->what, " was not launched by the flush of pending sends/receives");
  }

  bool poll() {
    impl_->check_usable(launch_->what);
    if (launch_->done->query()) {
      done_ = true;
      return true;
    }
    impl_->in_progress(launch_->what);  // throws on an asynchronous NCCL error
    return false;
  }

  std::shared_ptr<NcclCommunicator::Impl> impl_;
  std::shared_ptr<Launch> launch_;
  Seconds timeout_;
  bool done_ = false;
  bool ordered_ = false;
};

// Starts one NCCL collective on the comm stream, ordered after the compute stream.
template <class Call>
WorkPtr start(const std::shared_ptr<NcclCommunicator::Impl>& impl, const std::string& what, const char* call_name,
              Call&& call) {
  impl->check_usable(what);
  impl->flush();  // earlier sends/receives go first, as they were posted first
  impl->order_after_compute();
  impl->settle(call(impl->comm, impl->stream.get()), call_name, what);
  auto launch = std::make_shared<Launch>();
  launch->what = what;
  launch->done = std::make_shared<cuda::Event>();
  launch->done->record(impl->stream);
  return std::make_unique<NcclWork>(impl, std::move(launch));
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

void read_rank_and_size(NcclCommunicator::Impl& impl) {
  ZT_NCCL_CHECK(ncclCommUserRank(impl.comm, &impl.rank));
  ZT_NCCL_CHECK(ncclCommCount(impl.comm, &impl.size));
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclCommunicator::~NcclCommunicator() = default;

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap) {
  return create(bootstrap, collective_timeout_from_env());
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap, Seconds timeout) {
  if (!cuda::initialized()) {
    ZT_THROW_UNSUPPORTED(
        "NcclCommunicator::create: the CUDA backend is not initialized; call "
        "zt::cuda::init(<this rank's GPU>) first (make_nccl_world_communicator() "
        "does, with LOCAL_RANK)");
  }
  const int device = cuda::current_device();
  ZT_CUDA_CHECK(cudaSetDevice(device));

  // Rank 0's unique id, and whether rank 0 could make one, as host i32 over the bootstrap
  // communicator: a failure there is an error on every rank, not a hang.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0, "ncclUniqueId is whole i32 words");
  constexpr int64_t kWords = sizeof(ncclUniqueId) / sizeof(int32_t);
  OwnedTensor message({kWords + 1}, DType::I32, Device::cpu(), "ncclUniqueId");
  std::string id_error;
  if (bootstrap.rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) id_error = nccl_message(r, nullptr);
  }
  std::memcpy(message.data<int32_t>(), &id, sizeof(id));
  message.data<int32_t>()[kWords] = id_error.empty() ? 1 : 0;
  if (bootstrap.size() > 1) bootstrap.broadcast(message, 0);
  if (message.data<int32_t>()[kWords] != 1) {
    ZT_THROW_UNSUPPORTED("ncclGetUniqueId failed on rank 0", id_error.empty() ? "" : str(": ", id_error),
                         "; NCCL could not set up its bootstrap network (check NCCL_SOCKET_IFNAME "
                         "and run with NCCL_DEBUG=INFO)");
  }
  std::memcpy(&id, message.data<int32_t>(), sizeof(id));

  auto impl = std::make_shared<Impl>(device, world_rank_or(bootstrap.rank()), timeout);
  impl->rank = bootstrap.rank();
  impl->size = bootstrap.size();
  ncclConfig_t config = nonblocking_config();
  const ncclResult_t started = ncclCommInitRankConfig(&impl->comm, bootstrap.size(), id, bootstrap.rank(), &config);
  if (impl->comm == nullptr) {
    throw Error(ErrorKind::Internal, str("ncclCommInitRankConfig failed on ", impl->where(), ": ",
                                         nccl_message(started == ncclSuccess ? ncclInternalError : started, nullptr),
                                         "; run with NCCL_DEBUG=WARN for NCCL's own log"));
  }
  impl->settle(started, "ncclCommInitRankConfig", "NCCL initialisation");
  read_rank_and_size(*impl);
  ZT_CHECK(impl->rank == bootstrap.rank() && impl->size == bootstrap.size(), "NCCL says rank ", impl->rank, " of ",
           impl->size, " but the bootstrap communicator says ", bootstrap.rank(), " of ", bootstrap.size());
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl)));
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }
Seconds NcclCommunicator::timeout() const { return impl_->timeout; }
void NcclCommunicator::set_timeout(Seconds timeout) {
  ZT_CHECK(timeout.count() > 0, "set_timeout: ", timeout.count(), " s must be > 0");
  impl_->timeout = timeout;
}
int NcclCommunicator::device() const { return impl_->device; }

WorkPtr NcclCommunicator::all_reduce_async(const Tensor& buffer, ReduceOp op) {
  check_device_buffer("all_reduce", buffer, impl_->device);
  const std::string what =
      str("all_reduce(", reduce_op_name(op), ", ", dtype_name(buffer.dtype()), ", ", buffer.numel(), " elements)");
  if (buffer.numel() == 0) return std::make_unique<CompletedWork>();
  const auto count = static_cast<size_t>(buffer.numel());
  return start(impl_, what, "ncclAllReduce", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(buffer.data(), buffer.data(), count, nccl_type(buffer.dtype()), nccl_op(op), comm, stream);
  });
}

WorkPtr NcclCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output) {
  check_device_buffer("reduce_scatter", input, impl_->device);
  check_device_buffer("reduce_scatter", output, impl_->device);
  ZT_CHECK(input.dtype() == output.dtype(), "reduce_scatter: input is ", dtype_name(input.dtype()), " but output is ",
           dtype_name(output.dtype()), "; both must have one dtype");
  ZT_CHECK(input.numel() == output.numel() * impl_->size, "reduce_scatter: input has ", input.numel(),
           " elements, expected group size ", impl_->size, " x output's ", output.numel(),
           " (pad the flat buffer to a multiple of the group size)");
  ZT_CHECK(!overlaps(input, output), "reduce_scatter: output overlaps input; use a separate output buffer");
  const std::string what = describe("reduce_scatter", input);
  if (output.numel() == 0) return std::make_unique<CompletedWork>();
  const auto count = static_cast<size_t>(output.numel());
  return start(impl_, what, "ncclReduceScatter", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(input.data(), output.data(), count, nccl_type(input.dtype()), ncclSum, comm, stream);
  });
}

WorkPtr NcclCommunicator::all_gather_async(const Tensor& input, const Tensor& output) {
  check_device_buffer("all_gather", input, impl_->device);
  check_device_buffer("all_gather", output, impl_->device);
  ZT_CHECK(input.dtype() == output.dtype(), "all_gather: input is ", dtype_name(input.dtype()), " but output is ",
           dtype_name(output.dtype()), "; both must have one dtype");
  ZT_CHECK(output.numel() == input.numel() * impl_->size, "all_gather: output has ", output.numel(),
           " elements, expected group size ", impl_->size, " x input's ", input.numel());
  // In place (NCCL's own rule, as ZeRO gathers): input is exactly this rank's slice of output.
  ZT_CHECK(!overlaps(input, output) || is_gather_slice(input, output, impl_->rank),
           "all_gather: input overlaps output but is not rank ", impl_->rank,
           "'s slice of it; pass output.narrow(0, rank * n, n) or a separate buffer");
  const std::string what = describe("all_gather", output);
  if (input.numel() == 0) return std::make_unique<CompletedWork>();
  const auto count = static_cast<size_t>(input.numel());
  return start(impl_, what, "ncclAllGather", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(input.data(), output.data(), count, nccl_type(input.dtype()), comm, stream);
  });
}

WorkPtr NcclCommunicator::broadcast_async(const Tensor& buffer, int root) {
  check_device_buffer("broadcast", buffer, impl_->device);
  check_peer("broadcast (root)", root, impl_->size);
  const std::string what = str(describe("broadcast", buffer), " from root ", root);
  if (buffer.numel() == 0) return std::make_unique<CompletedWork>();
  const auto count = static_cast<size_t>(buffer.numel());
  return start(impl_, what, "ncclBroadcast", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buffer.data(), buffer.data(), count, nccl_type(buffer.dtype()), root, comm, stream);
  });
}

WorkPtr NcclCommunicator::all_to_all_v_async(const Tensor& input, const Tensor& output,
                                             const std::vector<int64_t>& send_counts,
                                             const std::vector<int64_t>& recv_counts) {
  check_device_buffer("all_to_all_v", input, impl_->device);
  check_device_buffer("all_to_all_v", output, impl_->device);
  check_all_to_all_v_layout(input, output, send_counts, recv_counts, impl_->size);
  const std::string what = str("all_to_all_v(", dtype_name(input.dtype()), ", ", input.numel(), " elements sent, ",
                               output.numel(), " received)");
  if (input.numel() == 0 && output.numel() == 0) return std::make_unique<CompletedWork>();
  const ncclDataType_t type = nccl_type(input.dtype());
  const size_t element = dtype_size(input.dtype());
  auto* in = static_cast<const char*>(input.data());
  auto* out = static_cast<char*>(output.data());
  const int size = impl_->size;
  return start(impl_, what, "ncclSend/ncclRecv", [&](ncclComm_t comm, cudaStream_t stream) {
    ZT_NCCL_CHECK(ncclGroupStart());
    // Every call is made even after a failure, so that the group is always ended.
    ncclResult_t first_error = ncclSuccess;
    const auto note = [&](ncclResult_t r) {
      if (r != ncclSuccess && r != ncclInProgress && first_error == ncclSuccess) first_error = r;
    };
    size_t sent = 0, received = 0;  // elements: the running prefix sums
    for (int p = 0; p < size; ++p) {
      const auto send_count = static_cast<size_t>(send_counts[p]);
      const auto recv_count = static_cast<size_t>(recv_counts[p]);
      if (send_count > 0) note(ncclSend(in + sent * element, send_count, type, p, comm, stream));
      if (recv_count > 0) note(ncclRecv(out + received * element, recv_count, type, p, comm, stream));
      sent += send_count;
      received += recv_count;
    }
    const ncclResult_t ended = ncclGroupEnd();
    return first_error != ncclSuccess ? first_error : ended;
  });
}

namespace {

WorkPtr post_p2p(const std::shared_ptr<NcclCommunicator::Impl>& impl, bool send, const Tensor& buffer, int peer,
                 int tag) {
  const char* op = send ? "send" : "recv";
  check_device_buffer(op, buffer, impl->device);
  check_peer(op, peer, impl->size);
  ZT_CHECK(tag >= 0, op, ": tag ", tag, " must be >= 0");
  const std::string what = str(describe(op, buffer), send ? " to rank " : " from rank ", peer, " tag ", tag);
  impl->check_usable(what);
  if (buffer.numel() == 0) return std::make_unique<CompletedWork>();
  // The ordering after the compute stream is fixed now, at the call; the NCCL call follows
  // on the comm stream when the batch is launched.
  impl->order_after_compute();
  PendingP2p p;
  p.send = send;
  p.data = buffer.data();
  p.count = static_cast<size_t>(buffer.numel());
  p.type = nccl_type(buffer.dtype());
  p.peer = peer;
  p.launch = std::make_shared<Launch>();
  p.launch->what = what;
  auto work = std::make_unique<NcclWork>(impl, p.launch);
  impl->pending.push_back(std::move(p));
  return work;
}

}  // namespace

WorkPtr NcclCommunicator::send_async(const Tensor& buffer, int peer, int tag) {
  return post_p2p(impl_, true, buffer, peer, tag);
}

WorkPtr NcclCommunicator::recv_async(const Tensor& buffer, int peer, int tag) {
  return post_p2p(impl_, false, buffer, peer, tag);
}

WorkPtr NcclCommunicator::barrier_async() {
  void* scratch = impl_->barrier_scratch.data();
  return start(impl_, "barrier", "ncclAllReduce", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream);
  });
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  ZT_CHECK(color >= 0 || color == kNoColor, "split: color ", color, " must be >= 0 (or kNoColor)");
  const std::string what = str("split(color ", color, ", key ", key, ")");
  impl_->check_usable(what);
  impl_->flush();
  ZT_CUDA_CHECK(cudaSetDevice(impl_->device));
  // Made first: its stream and scratch buffer, so nothing can fail after NCCL made the group.
  std::shared_ptr<Impl> child;
  if (color != kNoColor) {
    child = std::make_shared<Impl>(impl_->device, impl_->world_rank, impl_->timeout);
  }
  // NCCL stores the new handle from its own thread when the group is ready (NULL for
  // kNoColor), so the slot lives on the heap: it is freed only once NCCL has written it, and
  // leaked (one pointer) for kNoColor or after a failure, when NCCL may still write it.
  auto* slot = new ncclComm_t(nullptr);
  ncclConfig_t config = nonblocking_config();
  const ncclResult_t started =
      ncclCommSplit(impl_->comm, color == kNoColor ? NCCL_SPLIT_NOCOLOR : color, key, slot, &config);
  impl_->settle(started, "ncclCommSplit", what);  // waits for the parent's part
  if (color == kNoColor) return nullptr;
  Seconds elapsed{};
  const bool made = poll_until(impl_->timeout, elapsed, [&] {
    if (__atomic_load_n(slot, __ATOMIC_ACQUIRE) != nullptr) return true;
    impl_->in_progress(what);  // throws if NCCL reports an error on the parent
    return false;
  });
  if (!made) impl_->fail_timeout(what, elapsed, impl_->timeout);
  child->comm = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  delete slot;
  child->settle(ncclSuccess, "ncclCommSplit", what);  // the new communicator's own state
  read_rank_and_size(*child);
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(child)));
}

void NcclCommunicator::order_before_compute(Work& work) {
  if (auto* nccl = dynamic_cast<NcclWork*>(&work)) {
    nccl->order_before_compute();
  } else {
    work.wait();
  }
}

}  // namespace zt::comm
