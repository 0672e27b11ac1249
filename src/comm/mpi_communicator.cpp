#include "comm/mpi_communicator.h"

#include <climits>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "comm/env.h"
#include "comm/mpi_runtime.h"

namespace zt::comm {

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  Seconds timeout{kDefaultCollectiveTimeoutS};

  ~Impl() {
    if (comm != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm);
  }
};

namespace {

int world_rank() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// One started MPI request. A wait polls MPI_Test, which is also what drives the progress of
// MPI's non-blocking collectives (each internal round of an all_reduce advances only inside
// an MPI call), so the polls must come back to back while data moves: a sleep between them
// costs every round the sleep (an 8 MB all_reduce on 2 ranks took 14x longer with 200 us
// naps). Between polls the rank yields its core instead: with more ranks than cores (CI: 4
// ranks on 2 cores) the peer it waits for runs; otherwise the yield returns at once. After
// kSpinBudget of waiting the peer is busy elsewhere (computing, writing a checkpoint), not
// communicating: the wait backs off to sleeps of up to kMaxNap so it does not burn a core.
class MpiWork final : public Work {
  static constexpr Seconds kSpinBudget{0.05};
  static constexpr std::chrono::microseconds kMaxNap{1000};

 public:
  MpiWork(std::string what, MPI_Request request, int rank, int size, Seconds timeout,
          MPI_Datatype recv_type = MPI_DATATYPE_NULL, int recv_count = 0)
      : what_(std::move(what)),
        request_(request),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        recv_type_(recv_type),
        recv_count_(recv_count) {}

  // Keeps `arrays` alive until the request completes: a non-blocking vector collective
  // (MPI_Ialltoallv) may read its count and displacement arrays until then.
  void hold(std::shared_ptr<const void> arrays) { held_ = std::move(arrays); }

  ~MpiWork() override {
    if (done_ || mpi_finalized()) return;
    try {
      wait(timeout_);
    } catch (const std::exception& e) {
      // A destructor cannot throw; the request stays in flight and the job must abort.
      ZT_WARN("unfinished ", what_, " dropped: ", e.what());
    }
  }

  bool is_completed() override {
    if (!done_) poll();
    return done_;
  }

  void wait(Seconds timeout) override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    auto pause = std::chrono::microseconds(0);
    while (!poll()) {
      const Seconds elapsed = Clock::now() - start;
      if (elapsed > timeout) {
        throw Error(ErrorKind::Internal, str(what_, " timed out on rank ", rank_, " of ", size_, " (world rank ",
                                             world_rank(), ") after ", elapsed.count(), " s (timeout ", timeout.count(),
                                             " s, ZT_COLLECTIVE_TIMEOUT_S): not every rank of the group reached "
                                             "it — one failed, is stuck, or the ranks called collectives in "
                                             "different orders; see the other ranks' logs and abort the job"));
      }
      if (elapsed < kSpinBudget) {
        std::this_thread::yield();
      } else {
        pause = std::min(kMaxNap, pause + std::chrono::microseconds(10));
        std::this_thread::sleep_for(pause);
      }
    }
  }

 protected:
  Seconds default_timeout() const override { return timeout_; }

 private:
  bool poll() {
    if (done_) return true;
    int flag = 0;
    MPI_Status status;
    check_mpi(MPI_Test(&request_, &flag, &status), what_);
    if (!flag) return false;
    done_ = true;
    if (recv_type_ != MPI_DATATYPE_NULL) {
      int count = 0;
      MPI_Get_count(&status, recv_type_, &count);
      if (count != recv_count_) {
        ZT_THROW_INPUT(what_, ": received ", count, " elements, expected ", recv_count_,
                       "; send and receive the same count and dtype");
      }
    }
    return true;
  }

  std::string what_;
  MPI_Request request_;
  int rank_;
  int size_;
  Seconds timeout_;
  MPI_Datatype recv_type_;
  int recv_count_;
  std::shared_ptr<const void> held_;
  bool done_ = false;
};

int mpi_count(const char* op, const Tensor& t) {
  if (t.numel() > INT_MAX) {
    ZT_THROW_UNSUPPORTED(op, ": ", t.numel(),
                         " elements exceed MPI's int count (2^31-1); "
                         "use smaller buckets (reduce_bucket_size)");
  }
  return static_cast<int>(t.numel());
}

// MPI_Ialltoallv's arguments: per-peer counts and their prefix sums as MPI ints.
struct VectorLayout {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};

void to_mpi_ints(const char* which, const std::vector<int64_t>& counts, std::vector<int>& out_counts,
                 std::vector<int>& out_displs) {
  int64_t offset = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] > INT_MAX || offset > INT_MAX) {
      ZT_THROW_UNSUPPORTED("all_to_all_v: ", which, " for rank ", p, " (", counts[p], " elements at offset ", offset,
                           ") exceed MPI's int count and displacement (2^31-1 elements); "
                           "split the exchange into smaller all_to_all_v calls");
    }
    out_counts.push_back(static_cast<int>(counts[p]));
    out_displs.push_back(static_cast<int>(offset));
    offset += counts[p];
  }
}

std::string describe(const char* op, const Tensor& t) {
  return str(op, "(", dtype_name(t.dtype()), ", ", t.numel(), " elements)");
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiCommunicator::~MpiCommunicator() = default;

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() { return world(collective_timeout_from_env()); }

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(Seconds timeout) {
  MpiRuntime::get();
  auto impl = std::make_unique<Impl>();
  impl->timeout = timeout;
  // Collective without a deadline (MPI has no non-blocking split/dup for this); it runs
  // once at start-up, when every rank is calling it.
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm), "MPI_Comm_dup(MPI_COMM_WORLD)");
  check_mpi(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl)));
}

bool MpiCommunicator::thread_multiple() { return MpiRuntime::get().thread_level() >= MPI_THREAD_MULTIPLE; }

int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::size() const { return impl_->size; }
Seconds MpiCommunicator::timeout() const { return impl_->timeout; }

WorkPtr MpiCommunicator::all_reduce_async(const Tensor& buffer, ReduceOp op) {
  check_buffer("all_reduce", buffer);
  const std::string what =
      str("all_reduce(", reduce_op_name(op), ", ", dtype_name(buffer.dtype()), ", ", buffer.numel(), " elements)");
  const MpiRuntime& rt = MpiRuntime::get();
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), mpi_count("all_reduce", buffer), rt.datatype(buffer.dtype()),
                           rt.op(buffer.dtype(), op), impl_->comm, &request),
            what);
  return std::make_unique<MpiWork>(what, request, impl_->rank, impl_->size, impl_->timeout);
}

WorkPtr MpiCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output) {
  check_reduce_scatter(input, output, impl_->size);
  const std::string what = describe("reduce_scatter", input);
  const MpiRuntime& rt = MpiRuntime::get();
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(
      MPI_Ireduce_scatter_block(input.data(), output.data(), mpi_count("reduce_scatter", output),
                                rt.datatype(input.dtype()), rt.op(input.dtype(), ReduceOp::Sum), impl_->comm, &request),
      what);
  return std::make_unique<MpiWork>(what, request, impl_->rank, impl_->size, impl_->timeout);
}

WorkPtr MpiCommunicator::all_gather_async(const Tensor& input, const Tensor& output) {
  check_all_gather(input, output, impl_->size);
  const std::string what = describe("all_gather", output);
  const MpiRuntime& rt = MpiRuntime::get();
  const MPI_Datatype type = rt.datatype(input.dtype());
  const int count = mpi_count("all_gather", input);
  mpi_count("all_gather", output);
  MPI_Request request = MPI_REQUEST_NULL;
  if (is_gather_slice(input, output, impl_->rank)) {
    check_mpi(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, output.data(), count, type, impl_->comm, &request),
              what);
  } else {
    check_mpi(MPI_Iallgather(input.data(), count, type, output.data(), count, type, impl_->comm, &request), what);
  }
  return std::make_unique<MpiWork>(what, request, impl_->rank, impl_->size, impl_->timeout);
}

WorkPtr MpiCommunicator::broadcast_async(const Tensor& buffer, int root) {
  check_buffer("broadcast", buffer);
  check_peer("broadcast (root)", root, impl_->size);
  const std::string what = str(describe("broadcast", buffer), " from root ", root);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(buffer.data(), mpi_count("broadcast", buffer), MpiRuntime::get().datatype(buffer.dtype()), root,
                       impl_->comm, &request),
            what);
  return std::make_unique<MpiWork>(what, request, impl_->rank, impl_->size, impl_->timeout);
}

WorkPtr MpiCommunicator::all_to_all_v_async(const Tensor& input, const Tensor& output,
                                            const std::vector<int64_t>& send_counts,
                                            const std::vector<int64_t>& recv_counts) {
  check_all_to_all_v(input, output, send_counts, recv_counts, impl_->size);
  auto layout = std::make_shared<VectorLayout>();
  to_mpi_ints("send_counts", send_counts, layout->send_counts, layout->send_displs);
  to_mpi_ints("recv_counts", recv_counts, layout->recv_counts, layout->recv_displs);
  const std::string what = str("all_to_all_v(", dtype_name(input.dtype()), ", ", input.numel(), " elements sent, ",
                               output.numel(), " received)");
  const MPI_Datatype type = MpiRuntime::get().datatype(input.dtype());
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ialltoallv(input.data(), layout->send_counts.data(), layout->send_displs.data(), type, output.data(),
                           layout->recv_counts.data(), layout->recv_displs.data(), type, impl_->comm, &request),
            what);
  auto work = std::make_unique<MpiWork>(what, request, impl_->rank, impl_->size, impl_->timeout);
  work->hold(std::move(layout));
  return work;
}

WorkPtr MpiCommunicator::send_async(const Tensor& buffer, int peer, int tag) {
  check_buffer("send", buffer);
  check_peer("send", peer, impl_->size);
  ZT_CHECK(tag >= 0, "send: tag ", tag, " must be >= 0");
  const std::string what = str(describe("send", buffer), " to rank ", peer, " tag ", tag);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(buffer.data(), mpi_count("send", buffer), MpiRuntime::get().datatype(buffer.dtype()), peer, tag,
                      impl_->comm, &request),
            what);
  return std::make_unique<MpiWork>(what, request, impl_->rank, impl_->size, impl_->timeout);
}

WorkPtr MpiCommunicator::recv_async(const Tensor& buffer, int peer, int tag) {
  check_buffer("recv", buffer);
  check_peer("recv", peer, impl_->size);
  ZT_CHECK(tag >= 0, "recv: tag ", tag, " must be >= 0");
  const std::string what = str(describe("recv", buffer), " from rank ", peer, " tag ", tag);
  const MPI_Datatype type = MpiRuntime::get().datatype(buffer.dtype());
  const int count = mpi_count("recv", buffer);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Irecv(buffer.data(), count, type, peer, tag, impl_->comm, &request), what);
  return std::make_unique<MpiWork>(what, request, impl_->rank, impl_->size, impl_->timeout, type, count);
}

WorkPtr MpiCommunicator::barrier_async() {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(impl_->comm, &request), "barrier");
  return std::make_unique<MpiWork>("barrier", request, impl_->rank, impl_->size, impl_->timeout);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  ZT_CHECK(color >= 0 || color == kNoColor, "split: color ", color, " must be >= 0 (or kNoColor)");
  // MPI_Comm_split blocks without a deadline; a barrier with one first makes a missing
  // rank a timeout error rather than a hang.
  barrier_async()->wait();
  auto impl = std::make_unique<Impl>();
  impl->timeout = impl_->timeout;
  check_mpi(MPI_Comm_split(impl_->comm, color == kNoColor ? MPI_UNDEFINED : color, key, &impl->comm),
            "split (MPI_Comm_split)");
  if (impl->comm == MPI_COMM_NULL) return nullptr;
  check_mpi(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(impl)));
}

}  // namespace zt::comm
