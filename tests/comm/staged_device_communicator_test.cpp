// StagedDeviceCommunicator under mpirun at 1, 2 and 4 ranks (CTest comm.np1/np2/np4), on CPU
// ranks: host tensors stand in for device buffers, staged by
//   - host_staging(): plain copies, landed at once;
//   - a deferred staging (below): each copy lands only after a few polls, in queue order, and
//     host blocks start as NaN bytes, as a GPU's copy stream would leave them; an operation
//     that read a host copy before it landed, or reported done before its result landed,
//     gives a wrong value here.
// Every collective is checked against the MPI communicator on the same data, bit for bit
// (the staged one runs MPI's reduction on the host copies), all_to_all_v against a local
// reference with uneven counts, and split, ordering of many operations in flight, errors
// and the timeout of a copy that never lands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "comm/mpi_communicator.h"
#include "comm/staged_device_communicator.h"
#include "common/all_to_all_check.h"

namespace {
using zt::Device;
using zt::DType;
using zt::OwnedTensor;
using zt::Tensor;
using zt::comm::Communicator;
using zt::comm::HostBlock;
using zt::comm::MpiCommunicator;
using zt::comm::ReduceOp;
using zt::comm::Seconds;
using zt::comm::StagedDeviceCommunicator;
using zt::comm::Staging;
using zt::comm::StagingEvent;

Communicator& mpi() {
  static std::unique_ptr<MpiCommunicator> comm = MpiCommunicator::world();
  return *comm;
}

// Copies queued in order and landed one at a time, one every kPollsPerCopy polls of any of
// its events: the CPU picture of a copy stream that runs behind the host.
class DeferredStaging final : public Staging {
  static constexpr int kPollsPerCopy = 3;

  struct Queue {
    std::deque<std::function<void()>> copies;
    int64_t queued = 0, landed = 0, polls = 0;
    void poll() {
      if (++polls % kPollsPerCopy != 0 || copies.empty()) return;
      copies.front()();
      copies.pop_front();
      ++landed;
    }
  };

  class Event final : public StagingEvent {
   public:
    Event(std::shared_ptr<Queue> q, int64_t index) : q_(std::move(q)), index_(index) {}
    bool done() override {
      if (index_ >= q_->landed) q_->poll();
      return index_ < q_->landed;
    }
    void order_compute_after() override {
      EXPECT_LT(index_, q_->landed) << "the compute stream was ordered after a copy that had not landed";
    }

   private:
    std::shared_ptr<Queue> q_;
    int64_t index_;
  };

  std::unique_ptr<StagingEvent> queue(void* dst, const void* src, size_t bytes) {
    // The source is read when the copy lands (as a copy stream reads it on the GPU's time).
    q_->copies.push_back([dst, src, bytes] {
      if (bytes > 0) std::memcpy(dst, src, bytes);
    });
    return std::make_unique<Event>(q_, q_->queued++);
  }

 public:
  Device device() const override { return Device::cpu(); }
  std::string describe() const override { return "deferred host copies (test)"; }
  HostBlock host_block(size_t bytes) override {
    void* p = ::operator new(std::max<size_t>(bytes, 1));
    std::memset(p, 0xFF, std::max<size_t>(bytes, 1));  // NaN in every float dtype
    return HostBlock(p, [](void* q) { ::operator delete(q); });
  }
  std::unique_ptr<StagingEvent> to_host(void* host, const void* device, size_t bytes) override {
    return queue(host, device, bytes);
  }
  std::unique_ptr<StagingEvent> to_device(void* device, const void* host, size_t bytes) override {
    return queue(device, host, bytes);
  }

 private:
  std::shared_ptr<Queue> q_ = std::make_shared<Queue>();
};

// A staging whose copies never land (a GPU stuck in earlier work).
class StuckStaging final : public Staging {
  struct Never final : StagingEvent {
    bool done() override { return false; }
    void order_compute_after() override {}
  };

 public:
  Device device() const override { return Device::cpu(); }
  std::string describe() const override { return "stuck (test)"; }
  HostBlock host_block(size_t bytes) override {
    return HostBlock(::operator new(std::max<size_t>(bytes, 1)), [](void* q) { ::operator delete(q); });
  }
  std::unique_ptr<StagingEvent> to_host(void*, const void*, size_t) override { return std::make_unique<Never>(); }
  std::unique_ptr<StagingEvent> to_device(void*, const void*, size_t) override { return std::make_unique<Never>(); }
};

enum class Kind { Immediate, Deferred };

// One staged communicator of each kind over the MPI world, made on first use (collective:
// every rank runs the same tests in the same order).
Communicator& staged(Kind kind) {
  static std::unique_ptr<StagedDeviceCommunicator> immediate, deferred;
  auto& slot = kind == Kind::Immediate ? immediate : deferred;
  if (!slot) {
    slot = StagedDeviceCommunicator::create(
        mpi(), kind == Kind::Immediate ? zt::comm::host_staging() : std::make_shared<DeferredStaging>());
  }
  return *slot;
}

// Rank r's element i: multiples of 0.5 with rank-dependent signs; many are inexact sums in
// bf16/f16 (values up to ~60 with halves), so the rounding of each pairwise step shows.
float value(int r, int64_t i) {
  const float v = 0.5f * static_cast<float>((r + 1) * (i % 7 + 1)) + 0.03125f * static_cast<float>(i % 5);
  return ((r + i) % 3 == 0) ? -v : v;
}

OwnedTensor filled(DType dt, int64_t n, int r) {
  OwnedTensor t({n}, dt);
  for (int64_t i = 0; i < n; ++i) t->set_f32(i, zt::is_floating(dt) ? value(r, i) : 2 * value(r, i));
  return t;
}

// Byte equality: the staged result is MPI's, bit for bit.
void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0)
      << what << ": first values " << a.get_f32(0) << " vs " << b.get_f32(0);
}

class Staged : public ::testing::TestWithParam<Kind> {
 protected:
  Communicator& comm() { return staged(GetParam()); }
};

TEST_P(Staged, RankSizeAndName) {
  EXPECT_EQ(comm().rank(), mpi().rank());
  EXPECT_EQ(comm().size(), mpi().size());
  EXPECT_EQ(comm().timeout(), mpi().timeout());
  EXPECT_EQ(comm().backend_name(), "staged(mpi)");
}

TEST_P(Staged, AllReduceEqualsMpiBitwise) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      OwnedTensor a = filled(dt, 1001, comm().rank());
      OwnedTensor b = filled(dt, 1001, comm().rank());
      comm().all_reduce(a, op);
      mpi().all_reduce(b, op);
      expect_same_bytes(a, b, zt::str(zt::dtype_name(dt), " ", zt::comm::reduce_op_name(op)));
    }
  }
}

TEST_P(Staged, Bf16SumRoundsEachPairwiseStepAsMpi) {
  // 1 + 2^-9 on every rank: each pairwise step rounds to bf16, so the result is a left fold
  // with rounding (the MPI communicator's rule), not the exact sum rounded once.
  OwnedTensor t({4}, DType::BF16);
  t->fill_f32(1.0f + 1.0f / 512);
  const float x = t->get_f32(0);
  comm().all_reduce(t, ReduceOp::Sum);
  float folded = x;
  for (int r = 1; r < comm().size(); ++r) folded = zt::to_f32(zt::to_bf16(folded + x));
  EXPECT_EQ(t->get_f32(3), folded);
}

TEST_P(Staged, ReduceScatterEqualsMpiBitwise) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I64}) {
    const int64_t n = 333;
    OwnedTensor input = filled(dt, n * comm().size(), comm().rank());
    OwnedTensor out_staged({n}, dt), out_mpi({n}, dt);
    comm().reduce_scatter(input, out_staged);
    mpi().reduce_scatter(input, out_mpi);
    expect_same_bytes(out_staged, out_mpi, zt::dtype_name(dt));
  }
}

TEST_P(Staged, AllGatherSeparateAndInPlace) {
  const int64_t n = 257;
  const int size = comm().size();
  OwnedTensor input = filled(DType::BF16, n, comm().rank());
  OwnedTensor output({n * size}, DType::BF16);
  comm().all_gather(input, output);
  OwnedTensor in_place({n * size}, DType::BF16);
  in_place->zero();
  const Tensor mine = in_place->narrow(0, comm().rank() * n, n);
  mine.copy_from(input);
  comm().all_gather(mine, in_place);
  for (int r = 0; r < size; ++r) {
    OwnedTensor expected = filled(DType::BF16, n, r);
    expect_same_bytes(output->narrow(0, r * n, n), expected, zt::str("separate, rank ", r));
    expect_same_bytes(in_place->narrow(0, r * n, n), expected, zt::str("in place, rank ", r));
  }
}

TEST_P(Staged, BroadcastFromLastRankLeavesTheRootAlone) {
  const int root = comm().size() - 1;
  OwnedTensor t = filled(DType::I64, 100, comm().rank());
  comm().broadcast(t, root);
  expect_same_bytes(t, filled(DType::I64, 100, root), "broadcast");
}

TEST_P(Staged, AllToAllVUnevenCountsMatchReference) {
  for (DType dt : {DType::F32, DType::BF16, DType::I32, DType::I64}) zt::testing::check_all_to_all_v(comm(), dt, 1);
  zt::testing::check_all_to_all_v(comm(), DType::F32, 1000);  // segments of thousands of elements
}

TEST_P(Staged, AllToAllVWithEmptySides) {
  // Rank 0 sends nothing and receives everything; the exchange still runs on every rank.
  const int me = comm().rank();
  std::vector<int64_t> send_counts(comm().size(), 0), recv_counts(comm().size(), 0);
  if (me != 0) send_counts[0] = me;
  if (me == 0)
    for (int p = 1; p < comm().size(); ++p) recv_counts[p] = p;
  int64_t n_out = 0;
  for (int64_t c : recv_counts) n_out += c;
  OwnedTensor input({me == 0 ? 0 : me}, DType::F32);
  input->fill_f32(static_cast<float>(me));
  OwnedTensor output({n_out}, DType::F32);
  comm().all_to_all_v(input, output, send_counts, recv_counts);
  int64_t o = 0;
  for (int p = 1; p < comm().size() && me == 0; ++p)
    for (int j = 0; j < p; ++j) ASSERT_EQ(output->get_f32(o++), static_cast<float>(p));
}

TEST_P(Staged, SendRecvRing) {
  const int next = (comm().rank() + 1) % comm().size();
  const int prev = (comm().rank() + comm().size() - 1) % comm().size();
  OwnedTensor out = filled(DType::F32, 50, comm().rank());
  OwnedTensor in({50}, DType::F32);
  auto recv = comm().recv_async(in, prev, 7);
  auto send = comm().send_async(out, next, 7);
  send->wait();
  recv->wait();
  expect_same_bytes(in, filled(DType::F32, 50, prev), "ring");
}

TEST_P(Staged, ManyInFlightCompleteInAnyOrder) {
  // Posted in one order, waited for in the reverse (the copies back land in any order).
  const int size = comm().size(), me = comm().rank();
  const int64_t n = 512;
  OwnedTensor a = filled(DType::F32, n, me), a_ref = filled(DType::F32, n, me);
  OwnedTensor b = filled(DType::BF16, n * size, me), b_out({n}, DType::BF16), b_ref({n}, DType::BF16);
  OwnedTensor c = filled(DType::F16, n, me), c_out({n * size}, DType::F16);
  OwnedTensor d = filled(DType::I32, n, me);
  auto wa = comm().all_reduce_async(a, ReduceOp::Sum);
  auto wb = comm().reduce_scatter_async(b, b_out);
  auto wc = comm().all_gather_async(c, c_out);
  auto wbar = comm().barrier_async();
  auto wd = comm().all_reduce_async(d, ReduceOp::Max);
  wd->wait();
  wbar->wait();
  wc->wait(Seconds(30));
  EXPECT_TRUE(wc->is_completed());
  for (int polls = 0; polls < 100000 && !wb->is_completed(); ++polls) {
  }
  wb->wait();
  wa->wait();
  mpi().all_reduce(a_ref, ReduceOp::Sum);
  mpi().reduce_scatter(b, b_ref);
  expect_same_bytes(a, a_ref, "all_reduce");
  expect_same_bytes(b_out, b_ref, "reduce_scatter");
  for (int r = 0; r < size; ++r) expect_same_bytes(c_out->narrow(0, r * n, n), filled(DType::F16, n, r), "all_gather");
  OwnedTensor d_ref = filled(DType::I32, n, me);
  mpi().all_reduce(d_ref, ReduceOp::Max);
  expect_same_bytes(d, d_ref, "all_reduce max");
}

TEST_P(Staged, DroppedWorkFinishesItsOperation) {
  // Destroying an unfinished Work waits for it: the buffer holds the result afterwards.
  OwnedTensor t = filled(DType::F32, 64, comm().rank()), ref = filled(DType::F32, 64, comm().rank());
  { auto w = comm().all_reduce_async(t, ReduceOp::Sum); }
  mpi().all_reduce(ref, ReduceOp::Sum);
  expect_same_bytes(t, ref, "dropped all_reduce");
}

TEST_P(Staged, SplitEvenOddAndNoColor) {
  // Key -rank: the group orders its ranks from the highest world rank down.
  OwnedTensor pending = filled(DType::F32, 16, comm().rank());
  auto before = comm().all_reduce_async(pending, ReduceOp::Sum);  // in flight across the split
  auto group = comm().split(comm().rank() % 2, -comm().rank());
  before->wait();
  ASSERT_NE(group, nullptr);
  int members = 0, above = 0;
  float rank_sum = 0;
  for (int r = comm().rank() % 2; r < comm().size(); r += 2) {
    ++members;
    rank_sum += static_cast<float>(r);
    if (r > comm().rank()) ++above;
  }
  EXPECT_EQ(group->size(), members);
  EXPECT_EQ(group->rank(), above);
  EXPECT_EQ(group->backend_name(), "staged(mpi)");
  OwnedTensor t({3}, DType::F32);
  t->fill_f32(static_cast<float>(comm().rank()));
  group->all_reduce(t, ReduceOp::Sum);
  EXPECT_EQ(t->get_f32(2), rank_sum);
  zt::testing::check_all_to_all_v(*group, DType::F32, 1);

  auto rest = comm().split(comm().rank() == 0 ? Communicator::kNoColor : 0, comm().rank());
  if (comm().rank() == 0) {
    EXPECT_EQ(rest, nullptr);
  } else {
    ASSERT_NE(rest, nullptr);
    EXPECT_EQ(rest->size(), comm().size() - 1);
    EXPECT_EQ(rest->rank(), comm().rank() - 1);
    rest->barrier();
  }
}

TEST_P(Staged, BuffersOfAnotherDeviceAreRefusedLocally) {
  float host[4] = {};
  Tensor device(host, {4}, DType::F32, Device::cuda(0), "grad");
  try {
    comm().all_reduce(device, ReduceOp::Sum);
    FAIL() << "a buffer of another device was accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'grad'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("staged"), std::string::npos) << e.what();
  }
  OwnedTensor in({10 * comm().size() + 1}, DType::F32), out({10}, DType::F32);
  EXPECT_THROW(comm().reduce_scatter(in, out), zt::Error);
  EXPECT_THROW(comm().send(out, comm().size(), 0), zt::Error);
  // Still usable: nothing was started.
  OwnedTensor t = filled(DType::F32, 8, comm().rank()), ref = filled(DType::F32, 8, comm().rank());
  comm().all_reduce(t, ReduceOp::Max);
  mpi().all_reduce(ref, ReduceOp::Max);
  expect_same_bytes(t, ref, "after the refusals");
}

INSTANTIATE_TEST_SUITE_P(Stagings, Staged, ::testing::Values(Kind::Immediate, Kind::Deferred),
                         [](const auto& info) { return info.param == Kind::Immediate ? "Immediate" : "Deferred"; });

TEST(StagedDeviceCommunicator, CopyThatNeverLandsTimesOutNamingTheStep) {
  // The copy out is waited for at the call (the host operation starts there): a GPU that
  // never gets there is a timeout of the call itself, with the communicator's timeout.
  const std::unique_ptr<MpiCommunicator> quick = MpiCommunicator::world(Seconds(0.3));
  auto stuck = StagedDeviceCommunicator::create(*quick, std::make_shared<StuckStaging>());
  EXPECT_EQ(stuck->timeout(), Seconds(0.3));
  OwnedTensor t({8}, DType::F32);
  t->fill_f32(1.0f);
  try {
    stuck->all_reduce_async(t, ReduceOp::Sum);
    FAIL() << "a copy that never landed completed";
  } catch (const zt::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("all_reduce(sum, f32, 8 elements, staged) timed out"), std::string::npos) << m;
    EXPECT_NE(m.find("waiting for the copy to the host"), std::string::npos) << m;
    EXPECT_NE(m.find(zt::str("rank ", stuck->rank(), " of ", stuck->size())), std::string::npos) << m;
  }
  // The communicator refuses what follows (the job aborts after a timeout).
  try {
    stuck->barrier_async();
    FAIL() << "a failed staged communicator started another operation";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
  }
  mpi().barrier();
}

}  // namespace
