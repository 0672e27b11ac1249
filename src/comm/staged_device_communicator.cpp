// StagedDeviceCommunicator (see staged_device_communicator.h): device buffers copied to host
// memory, moved by a host communicator, copied back. Only the CUDA-free face of the backend
// (backend/cuda_api.h) is used, so this file builds and is tested in every build.
#include "comm/staged_device_communicator.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "core/log.h"
#include "comm/env.h"

namespace zt::comm {

namespace {

using Clock = std::chrono::steady_clock;

// ---- stagings -------------------------------------------------------------------------

class LandedEvent final : public StagingEvent {
 public:
  bool done() override { return true; }
  void order_compute_after() override {}
};

class HostStaging final : public Staging {
 public:
  Device device() const override { return Device::cpu(); }
  std::string describe() const override { return "host memory (memcpy)"; }
  HostBlock host_block(size_t bytes) override {
    return HostBlock(::operator new(std::max<size_t>(bytes, 1)), [](void* p) { ::operator delete(p); });
  }
  std::unique_ptr<StagingEvent> to_host(void* host, const void* device, size_t bytes) override {
    if (bytes > 0) std::memcpy(host, device, bytes);
    return std::make_unique<LandedEvent>();
  }
  std::unique_ptr<StagingEvent> to_device(void* device, const void* host, size_t bytes) override {
    if (bytes > 0) std::memcpy(device, host, bytes);
    return std::make_unique<LandedEvent>();
  }
};

class CudaCopyEvent final : public StagingEvent {
 public:
  explicit CudaCopyEvent(cuda::CopyEvent event) : event_(std::move(event)) {}
  bool done() override { return event_.done(); }
  void order_compute_after() override { event_.order_compute_after(); }

 private:
  cuda::CopyEvent event_;
};

// Pinned blocks by power-of-two size class, kept for reuse: cudaHostAlloc costs far more than
// a copy of a small bucket. Blocks return here when the operation holding them is done; the
// pool (and its memory) goes when the last block and the staging are gone.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  ~PinnedPool() {
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) cuda::pinned_host_allocator().deallocate(p, bytes);
  }
  HostBlock take(size_t bytes) {
    size_t size = 4096;
    while (size < bytes) size *= 2;
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& blocks = free_[size];
      if (!blocks.empty()) {
        p = blocks.back();
        blocks.pop_back();
      }
    }
    if (p == nullptr) p = cuda::pinned_host_allocator().allocate(size);
    std::shared_ptr<PinnedPool> self = shared_from_this();
    return HostBlock(p, [self, size](void* q) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->free_[size].push_back(q);
    });
  }

 private:
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
};

class CudaStaging final : public Staging {
 public:
  CudaStaging() : device_(cuda::current_device()), pool_(std::make_shared<PinnedPool>()) {}
  Device device() const override { return Device::cuda(device_); }
  std::string describe() const override { return "pinned host memory"; }
  HostBlock host_block(size_t bytes) override { return pool_->take(bytes); }
  std::unique_ptr<StagingEvent> to_host(void* host, const void* device, size_t bytes) override {
    stream_.wait_for_compute();
    stream_.to_host(host, device, bytes);
    return std::make_unique<CudaCopyEvent>(stream_.record());
  }
  std::unique_ptr<StagingEvent> to_device(void* device, const void* host, size_t bytes) override {
    stream_.to_device(device, host, bytes);
    return std::make_unique<CudaCopyEvent>(stream_.record());
  }

 private:
  int device_;
  std::shared_ptr<PinnedPool> pool_;
  cuda::CopyStream stream_;  // after pool_: destroyed first, waiting for its copies
};

// ---- operations ---------------------------------------------------------------------

enum class Step { CopyOut, Transfer, CopyBack, Done };

const char* step_name(Step step) {
  switch (step) {
    case Step::CopyOut:
      return "waiting for the copy to the host (the compute stream's earlier work)";
    case Step::Transfer:
      return "in the host transfer (the other ranks)";
    case Step::CopyBack:
      return "copying the result back to the device";
    case Step::Done:
      return "done";
  }
  return "?";
}

// One operation in flight, from the call to the copy back.
struct Op {
  std::string what;
  Step step = Step::CopyOut;
  std::unique_ptr<StagingEvent> out;                         // device -> host
  std::function<WorkPtr(Communicator&)> start;               // the host operation on the host copies
  WorkPtr transfer;                                          // its Work once started
  std::function<std::unique_ptr<StagingEvent>()> copy_back;  // null: nothing comes back
  std::unique_ptr<StagingEvent> in;                          // host -> device
  std::vector<HostBlock> blocks;                             // the host copies, held until done
};

}  // namespace

struct StagedDeviceCommunicator::Impl {
  std::unique_ptr<Communicator> host;
  std::shared_ptr<Staging> staging;
  std::string failure;  // why the communicator is unusable; empty while it is usable
  int world_rank = 0;
  // The host communicator's, or ZT_COLLECTIVE_TIMEOUT_S over the single-process one (which
  // never waits, so it has none): the copies take GPU time even on one rank.
  Seconds timeout{kDefaultCollectiveTimeoutS};

  std::string where() const {
    return str("rank ", host->rank(), " of ", host->size(), " (world rank ", world_rank, ", ", staging->device().name(),
               ")");
  }

  void check_usable(const std::string& what) const {
    if (!failure.empty())
      throw Error(ErrorKind::Internal,
                  str(what, " on ", where(), ": this staged communicator failed earlier: ", failure));
  }

  // Waits for `op`'s copy out (the compute stream's earlier work, then the copy) and starts
  // its host operation, at the call as the MPI communicator starts its own: a start left to
  // a later poll could leave a peer waiting for it while this rank blocks in another
  // communicator's collective (a deadlock), and every rank starts its operations in call
  // order, as MPI requires of one communicator.
  void start(Op& op) {
    if (op.out)
      poll_until(
          op.what, timeout, [&] { return op.out->done(); }, [] { return Step::CopyOut; });
    try {
      op.transfer = op.start(*host);
    } catch (const std::exception& e) {
      failure = str(op.what, ": ", e.what());
      throw;
    }
    op.step = Step::Transfer;
  }

  // Moves `op` on as far as it can go now (never blocks); true when it is done.
  bool advance(Op& op) {
    if (op.step == Step::Done) return true;
    check_usable(op.what);
    if (op.step == Step::Transfer) {
      if (!op.transfer->is_completed()) return false;
      op.transfer.reset();
      if (op.copy_back) {
        op.in = op.copy_back();
        op.step = Step::CopyBack;
      } else {
        op.step = Step::Done;
      }
    }
    if (op.step == Step::CopyBack) {
      if (!op.in->done()) return false;
      // Later kernels read the result: the compute stream waits for the copy on the GPU.
      op.in->order_compute_after();
      op.step = Step::Done;
    }
    op.out.reset();
    op.in.reset();
    op.blocks.clear();
    return true;
  }

  // Polls until `ready` or the deadline; on expiry the communicator is marked failed and
  // the error names the operation, the rank and `step`.
  template <class Ready>
  void poll_until(const std::string& what, Seconds limit, Ready&& ready, const std::function<Step()>& step) {
    // As MpiWork: yield while data is likely moving, then back off to short naps.
    constexpr Seconds kSpinBudget{0.05};
    const auto began = Clock::now();
    auto pause = std::chrono::microseconds(0);
    while (!ready()) {
      const Seconds elapsed = Clock::now() - began;
      if (elapsed > limit) {
        const Step at = step();
        const char* why = at == Step::Transfer
                              ? "not every rank of the group reached it — one failed, is stuck, or the ranks called "
                                "collectives in different orders; see the other ranks' logs"
                              : "the GPU did not get there — the compute stream's earlier work is stuck or the device "
                                "failed";
        const std::string message =
            str(what, " timed out on ", where(), " after ", elapsed.count(), " s ", step_name(at), " (timeout ",
                limit.count(), " s, ZT_COLLECTIVE_TIMEOUT_S): ", why, "; abort the job");
        if (failure.empty()) failure = message;
        throw Error(ErrorKind::Internal, message);
      }
      if (elapsed < kSpinBudget) {
        std::this_thread::yield();
      } else {
        pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(10));
        std::this_thread::sleep_for(pause);
      }
    }
  }
};

namespace {

class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<StagedDeviceCommunicator::Impl> impl, std::shared_ptr<Op> op)
      : impl_(std::move(impl)), op_(std::move(op)), timeout_(impl_->timeout) {}

  ~StagedWork() override {
    if (op_->step == Step::Done || !impl_->failure.empty()) return;
    try {
      wait(timeout_);
    } catch (const std::exception& e) {
      // A destructor cannot throw; the device buffers may still be in use: abort the job.
      ZT_WARN("unfinished ", op_->what, " dropped: ", e.what());
    }
  }

  bool is_completed() override { return impl_->advance(*op_); }

  void wait(Seconds timeout) override {
    impl_->poll_until(
        op_->what, timeout, [&] { return impl_->advance(*op_); }, [&] { return op_->step; });
  }

 protected:
  Seconds default_timeout() const override { return timeout_; }

 private:
  std::shared_ptr<StagedDeviceCommunicator::Impl> impl_;
  std::shared_ptr<Op> op_;
  Seconds timeout_;
};

std::string describe(const char* op, const Tensor& t) {
  return str(op, "(", dtype_name(t.dtype()), ", ", t.numel(), " elements, staged)");
}

// A host tensor over a block: the 1-D copy of `like`.
Tensor host_view(const HostBlock& block, const Tensor& like, int64_t numel) {
  return Tensor(block.get(), {numel}, like.dtype(), Device::cpu(), like.name());
}

int world_rank_or(int fallback) {
  try {
    return read_launch_env().rank;
  } catch (const std::exception&) {
    return fallback;
  }
}

}  // namespace

// ---- the communicator ---------------------------------------------------------------

std::shared_ptr<Staging> host_staging() { return std::make_shared<HostStaging>(); }
std::shared_ptr<Staging> cuda_staging() {
  if (!cuda::initialized())
    ZT_THROW_UNSUPPORTED(
        "the staged device communicator needs the CUDA backend initialized (zt::cuda::init(<this rank's GPU>)): "
        "comm::make_device_world_communicator() does it");
  return std::make_shared<CudaStaging>();
}

StagedDeviceCommunicator::StagedDeviceCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Works still held elsewhere keep the Impl: each finishes (or fails) its own operation.
StagedDeviceCommunicator::~StagedDeviceCommunicator() = default;

std::unique_ptr<StagedDeviceCommunicator> StagedDeviceCommunicator::create(Communicator& host,
                                                                           std::shared_ptr<Staging> staging) {
  ZT_CHECK(staging != nullptr, "StagedDeviceCommunicator::create: no staging");
  auto impl = std::make_shared<Impl>();
  impl->host = host.split(0, host.rank());  // a communicator of its own: its messages never mix with host's
  ZT_CHECK(impl->host != nullptr, "split(0) of the host communicator returned no group");
  impl->staging = std::move(staging);
  impl->world_rank = world_rank_or(host.rank());
  impl->timeout = impl->host->timeout() > Seconds(0) ? impl->host->timeout() : collective_timeout_from_env();
  return std::unique_ptr<StagedDeviceCommunicator>(new StagedDeviceCommunicator(std::move(impl)));
}

int StagedDeviceCommunicator::rank() const { return impl_->host->rank(); }
int StagedDeviceCommunicator::size() const { return impl_->host->size(); }
Seconds StagedDeviceCommunicator::timeout() const { return impl_->timeout; }
std::string StagedDeviceCommunicator::backend_name() const { return str("staged(", impl_->host->backend_name(), ")"); }
const Staging& StagedDeviceCommunicator::staging() const { return *impl_->staging; }

namespace {

// The buffer checks of the other communicators, on the staging's device.
void check_staged_buffer(const char* op, const Tensor& t, const Staging& staging) {
  check_buffer_any_device(op, t);
  if (t.device() != staging.device()) {
    ZT_THROW_UNSUPPORTED(
        op, ": tensor '", t.name(), "' is on ", t.device().name(), " but this staged communicator moves ",
        staging.device().name(), " buffers (",
        t.device().is_cpu() ? "host buffers go through the MPI communicator" : "allocate it on this rank's GPU", ")");
  }
}

// Starts `op` (its copy out queued already) and returns its Work.
WorkPtr enqueue(const std::shared_ptr<StagedDeviceCommunicator::Impl>& impl, std::shared_ptr<Op> op) {
  impl->start(*op);
  return std::make_unique<StagedWork>(impl, std::move(op));
}

// The copy back of `bytes` from `block` into `device`.
std::function<std::unique_ptr<StagingEvent>()> copy_back_to(const std::shared_ptr<Staging>& staging, void* device,
                                                            const HostBlock& block, size_t bytes) {
  return [staging, device, src = block.get(), bytes] { return staging->to_device(device, src, bytes); };
}

}  // namespace

WorkPtr StagedDeviceCommunicator::all_reduce_async(const Tensor& buffer, ReduceOp op) {
  check_staged_buffer("all_reduce", buffer, *impl_->staging);
  auto o = std::make_shared<Op>();
  o->what = str("all_reduce(", reduce_op_name(op), ", ", dtype_name(buffer.dtype()), ", ", buffer.numel(),
                " elements, staged)");
  impl_->check_usable(o->what);
  const size_t bytes = buffer.nbytes();
  const HostBlock block = impl_->staging->host_block(bytes);
  const Tensor host = host_view(block, buffer, buffer.numel());
  o->out = impl_->staging->to_host(block.get(), buffer.data(), bytes);
  o->start = [host, op](Communicator& c) { return c.all_reduce_async(host, op); };
  o->copy_back = copy_back_to(impl_->staging, buffer.data(), block, bytes);
  o->blocks = {block};
  return enqueue(impl_, std::move(o));
}

WorkPtr StagedDeviceCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output) {
  check_reduce_scatter(input, output, size(), BufferPlace::Any);
  check_staged_buffer("reduce_scatter", input, *impl_->staging);
  auto o = std::make_shared<Op>();
  o->what = describe("reduce_scatter", input);
  impl_->check_usable(o->what);
  const HostBlock in_block = impl_->staging->host_block(input.nbytes());
  const HostBlock out_block = impl_->staging->host_block(output.nbytes());
  const Tensor host_in = host_view(in_block, input, input.numel());
  const Tensor host_out = host_view(out_block, output, output.numel());
  o->out = impl_->staging->to_host(in_block.get(), input.data(), input.nbytes());
  o->start = [host_in, host_out](Communicator& c) { return c.reduce_scatter_async(host_in, host_out); };
  o->copy_back = copy_back_to(impl_->staging, output.data(), out_block, output.nbytes());
  o->blocks = {in_block, out_block};
  return enqueue(impl_, std::move(o));
}

WorkPtr StagedDeviceCommunicator::all_gather_async(const Tensor& input, const Tensor& output) {
  check_all_gather(input, output, size(), BufferPlace::Any);
  check_staged_buffer("all_gather", input, *impl_->staging);
  const auto* in = static_cast<const char*>(input.data());
  const auto* out = static_cast<const char*>(output.data());
  const bool overlap = input.nbytes() > 0 && in < out + output.nbytes() && out < in + input.nbytes();
  ZT_CHECK(!overlap || is_gather_slice(input, output, rank()), "all_gather: input overlaps output but is not rank ",
           rank(), "'s slice of it; pass output.narrow(0, rank * n, n) or a separate buffer");
  auto o = std::make_shared<Op>();
  o->what = describe("all_gather", output);
  impl_->check_usable(o->what);
  const HostBlock block = impl_->staging->host_block(output.nbytes());
  const Tensor host_out = host_view(block, output, output.numel());
  const Tensor host_mine = host_out.narrow(0, rank() * input.numel(), input.numel());
  o->out = impl_->staging->to_host(host_mine.data(), input.data(), input.nbytes());
  o->start = [host_mine, host_out](Communicator& c) { return c.all_gather_async(host_mine, host_out); };
  o->copy_back = copy_back_to(impl_->staging, output.data(), block, output.nbytes());
  o->blocks = {block};
  return enqueue(impl_, std::move(o));
}

WorkPtr StagedDeviceCommunicator::broadcast_async(const Tensor& buffer, int root) {
  check_staged_buffer("broadcast", buffer, *impl_->staging);
  check_peer("broadcast (root)", root, size());
  auto o = std::make_shared<Op>();
  o->what = str(describe("broadcast", buffer), " from root ", root);
  impl_->check_usable(o->what);
  const size_t bytes = buffer.nbytes();
  const HostBlock block = impl_->staging->host_block(bytes);
  const Tensor host = host_view(block, buffer, buffer.numel());
  const bool root_here = rank() == root;
  // The others copy nothing out; the empty copy still orders their copy back after the
  // compute stream's earlier use of the buffer.
  o->out = impl_->staging->to_host(block.get(), buffer.data(), root_here ? bytes : 0);
  o->start = [host, root](Communicator& c) { return c.broadcast_async(host, root); };
  if (!root_here) o->copy_back = copy_back_to(impl_->staging, buffer.data(), block, bytes);
  o->blocks = {block};
  return enqueue(impl_, std::move(o));
}

WorkPtr StagedDeviceCommunicator::all_to_all_v_async(const Tensor& input, const Tensor& output,
                                                     const std::vector<int64_t>& send_counts,
                                                     const std::vector<int64_t>& recv_counts) {
  check_all_to_all_v(input, output, send_counts, recv_counts, size(), BufferPlace::Any);
  check_staged_buffer("all_to_all_v", input, *impl_->staging);
  auto o = std::make_shared<Op>();
  o->what = str("all_to_all_v(", dtype_name(input.dtype()), ", ", input.numel(), " elements sent, ", output.numel(),
                " received, staged)");
  impl_->check_usable(o->what);
  const HostBlock in_block = impl_->staging->host_block(input.nbytes());
  const HostBlock out_block = impl_->staging->host_block(output.nbytes());
  const Tensor host_in = host_view(in_block, input, input.numel());
  const Tensor host_out = host_view(out_block, output, output.numel());
  o->out = impl_->staging->to_host(in_block.get(), input.data(), input.nbytes());
  o->start = [host_in, host_out, send_counts, recv_counts](Communicator& c) {
    return c.all_to_all_v_async(host_in, host_out, send_counts, recv_counts);
  };
  o->copy_back = copy_back_to(impl_->staging, output.data(), out_block, output.nbytes());
  o->blocks = {in_block, out_block};
  return enqueue(impl_, std::move(o));
}

WorkPtr StagedDeviceCommunicator::send_async(const Tensor& buffer, int peer, int tag) {
  check_staged_buffer("send", buffer, *impl_->staging);
  check_peer("send", peer, size());
  ZT_CHECK(tag >= 0, "send: tag ", tag, " must be >= 0");
  auto o = std::make_shared<Op>();
  o->what = str(describe("send", buffer), " to rank ", peer, " tag ", tag);
  impl_->check_usable(o->what);
  const HostBlock block = impl_->staging->host_block(buffer.nbytes());
  const Tensor host = host_view(block, buffer, buffer.numel());
  o->out = impl_->staging->to_host(block.get(), buffer.data(), buffer.nbytes());
  o->start = [host, peer, tag](Communicator& c) { return c.send_async(host, peer, tag); };
  o->blocks = {block};
  return enqueue(impl_, std::move(o));
}

WorkPtr StagedDeviceCommunicator::recv_async(const Tensor& buffer, int peer, int tag) {
  check_staged_buffer("recv", buffer, *impl_->staging);
  check_peer("recv", peer, size());
  ZT_CHECK(tag >= 0, "recv: tag ", tag, " must be >= 0");
  auto o = std::make_shared<Op>();
  o->what = str(describe("recv", buffer), " from rank ", peer, " tag ", tag);
  impl_->check_usable(o->what);
  const HostBlock block = impl_->staging->host_block(buffer.nbytes());
  const Tensor host = host_view(block, buffer, buffer.numel());
  o->out = impl_->staging->to_host(block.get(), buffer.data(), 0);  // orders the copy back only
  o->start = [host, peer, tag](Communicator& c) { return c.recv_async(host, peer, tag); };
  o->copy_back = copy_back_to(impl_->staging, buffer.data(), block, buffer.nbytes());
  o->blocks = {block};
  return enqueue(impl_, std::move(o));
}

WorkPtr StagedDeviceCommunicator::barrier_async() {
  auto o = std::make_shared<Op>();
  o->what = "barrier (staged)";
  impl_->check_usable(o->what);
  o->out = impl_->staging->to_host(nullptr, nullptr, 0);  // after the compute queued so far
  o->start = [](Communicator& c) { return c.barrier_async(); };
  return enqueue(impl_, std::move(o));
}

std::unique_ptr<Communicator> StagedDeviceCommunicator::split(int color, int key) {
  ZT_CHECK(color >= 0 || color == kNoColor, "split: color ", color, " must be >= 0 (or kNoColor)");
  const std::string what = str("split(color ", color, ", key ", key, ", staged)");
  impl_->check_usable(what);
  std::unique_ptr<Communicator> group = impl_->host->split(color, key);
  if (!group) return nullptr;
  auto impl = std::make_shared<Impl>();
  impl->host = std::move(group);
  impl->staging = impl_->staging;
  impl->world_rank = impl_->world_rank;
  impl->timeout = impl_->timeout;
  return std::unique_ptr<Communicator>(new StagedDeviceCommunicator(std::move(impl)));
}

}  // namespace zt::comm
