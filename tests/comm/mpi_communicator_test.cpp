// MpiCommunicator under mpirun at 1, 2 and 4 ranks (CTest dist.np1/np2/np4): every rank
// runs every test; expected values are computed locally from the same per-rank formula.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "comm/mpi_communicator.h"
#include "common/all_to_all_check.h"

namespace {
using zt::DType;
using zt::OwnedTensor;
using zt::comm::Communicator;
using zt::comm::MpiCommunicator;
using zt::comm::ReduceOp;
using zt::comm::Seconds;

Communicator& world() {
  static std::unique_ptr<MpiCommunicator> comm = MpiCommunicator::world();
  return *comm;
}

// Rank r's element i: multiples of 0.5 up to 56, exact in every dtype, and rank-dependent
// signs so that max differs from the last rank's value.
float value(int r, int64_t i) {
  const float v = 0.5f * static_cast<float>((r + 1) * (i % 7 + 1));
  return ((r + i) % 3 == 0) ? -v : v;
}

float round_to(DType dt, float v) {
  switch (dt) {
    case DType::BF16:
      return zt::to_f32(zt::to_bf16(v));
    case DType::F16:
      return zt::to_f32(zt::to_f16(v));
    case DType::I32:
    case DType::I64:
      return static_cast<float>(static_cast<int64_t>(v));
    default:
      return v;
  }
}

// Integers get whole values (value() * 2), floats value().
float element(DType dt, int r, int64_t i) { return zt::is_floating(dt) ? value(r, i) : 2 * value(r, i); }

OwnedTensor filled(DType dt, int64_t n, int r, int64_t offset = 0) {
  OwnedTensor t({n}, dt);
  for (int64_t i = 0; i < n; ++i) t->set_f32(i, element(dt, r, offset + i));
  return t;
}

class AllReduce : public ::testing::TestWithParam<DType> {};

TEST_P(AllReduce, SumAndMaxMatchLocalReduction) {
  const DType dt = GetParam();
  Communicator& comm = world();
  const int64_t n = 1000;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    OwnedTensor t = filled(dt, n, comm.rank());
    comm.all_reduce(t, op);
    for (int64_t i = 0; i < n; ++i) {
      float expected = element(dt, 0, i);
      for (int r = 1; r < comm.size(); ++r) {
        expected = op == ReduceOp::Sum ? expected + element(dt, r, i) : std::max(expected, element(dt, r, i));
      }
      ASSERT_EQ(t->get_f32(i), round_to(dt, expected))
          << zt::dtype_name(dt) << " " << zt::comm::reduce_op_name(op) << " i=" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AllReduce,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64),
                         [](const auto& info) { return std::string(zt::dtype_name(info.param)); });

TEST(MpiCommunicator, Bf16SumRoundsThroughF32) {
  // 1 + 2^-9 per rank: not representable in bf16 alone; each pairwise step rounds, so the
  // result equals a left fold with rounding when every rank holds the same value.
  Communicator& comm = world();
  OwnedTensor t({4}, DType::BF16);
  t->fill_f32(1.0f + 1.0f / 512);
  const float x = t->get_f32(0);
  comm.all_reduce(t, ReduceOp::Sum);
  float folded = x;
  for (int r = 1; r < comm.size(); ++r) folded = round_to(DType::BF16, folded + x);
  EXPECT_EQ(t->get_f32(3), folded);
}

TEST(MpiCommunicator, ReduceScatterEqualsAllReduceSlice) {
  Communicator& comm = world();
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32}) {
    const int64_t n = 333;
    OwnedTensor input = filled(dt, n * comm.size(), comm.rank());
    OwnedTensor reduced = filled(dt, n * comm.size(), comm.rank());
    OwnedTensor output({n}, dt);
    comm.reduce_scatter(input, output);
    comm.all_reduce(reduced, ReduceOp::Sum);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(output->get_f32(i), reduced->get_f32(comm.rank() * n + i)) << zt::dtype_name(dt) << " i=" << i;
    }
  }
}

TEST(MpiCommunicator, AllGatherSeparateAndInPlace) {
  Communicator& comm = world();
  const int64_t n = 257;
  OwnedTensor input = filled(DType::BF16, n, comm.rank());
  OwnedTensor output({n * comm.size()}, DType::BF16);
  comm.all_gather(input, output);
  OwnedTensor in_place({n * comm.size()}, DType::BF16);
  in_place->zero();
  const zt::Tensor mine = in_place->narrow(0, comm.rank() * n, n);
  mine.copy_from(input);
  comm.all_gather(mine, in_place);
  for (int r = 0; r < comm.size(); ++r) {
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(output->get_f32(r * n + i), round_to(DType::BF16, value(r, i)));
      ASSERT_EQ(in_place->get_f32(r * n + i), round_to(DType::BF16, value(r, i)));
    }
  }
}

TEST(MpiCommunicator, BroadcastFromLastRank) {
  Communicator& comm = world();
  const int root = comm.size() - 1;
  OwnedTensor t = filled(DType::I64, 100, comm.rank());
  comm.broadcast(t, root);
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(t->get_f32(i), element(DType::I64, root, i));
}

TEST(MpiCommunicator, AllToAllVUnevenCountsMatchReference) {
  for (DType dt : {DType::F32, DType::BF16, DType::I32, DType::I64}) zt::testing::check_all_to_all_v(world(), dt, 1);
  zt::testing::check_all_to_all_v(world(), DType::F32, 1000);  // segments of thousands of elements
}

TEST(MpiCommunicator, AllToAllVAsyncWithEmptySidesAndOtherCollectives) {
  // Rank 0 sends nothing and receives everything; the collective still runs on every rank.
  Communicator& comm = world();
  const int me = comm.rank();
  std::vector<int64_t> send_counts(comm.size(), 0), recv_counts(comm.size(), 0);
  if (me != 0) send_counts[0] = me;
  if (me == 0) {
    for (int p = 1; p < comm.size(); ++p) recv_counts[p] = p;
  }
  int64_t n_in = me == 0 ? 0 : me, n_out = 0;
  for (int64_t c : recv_counts) n_out += c;
  OwnedTensor input({n_in}, DType::F32);
  input->fill_f32(static_cast<float>(me));
  OwnedTensor output({n_out}, DType::F32);
  OwnedTensor other = filled(DType::F32, 16, me);
  auto exchange = comm.all_to_all_v_async(input, output, send_counts, recv_counts);
  auto reduce = comm.all_reduce_async(other, ReduceOp::Max);
  reduce->wait();
  exchange->wait();
  int64_t o = 0;
  for (int p = 1; p < comm.size() && me == 0; ++p) {
    for (int j = 0; j < p; ++j) ASSERT_EQ(output->get_f32(o++), static_cast<float>(p));
  }
}

TEST(MpiCommunicator, AllToAllVBadCountsFailLocally) {
  Communicator& comm = world();
  const int n = comm.size();
  OwnedTensor input({2 * n}, DType::F32);
  OwnedTensor output({2 * n}, DType::F32);
  const std::vector<int64_t> twos(n, 2);
  const auto message = [&](const std::vector<int64_t>& sc, const std::vector<int64_t>& rc, const zt::Tensor& in,
                           const zt::Tensor& out) {
    try {
      comm.all_to_all_v(in, out, sc, rc);
    } catch (const zt::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<int64_t> short_counts(n + 1, 0);
  short_counts[0] = 2 * n;
  EXPECT_NE(message(short_counts, twos, input, output).find("all_to_all_v: send_counts has"), std::string::npos);
  std::vector<int64_t> too_many = twos;
  too_many[0] = 3;
  EXPECT_NE(message(too_many, twos, input, output).find("send_counts sum to"), std::string::npos);
  EXPECT_NE(message(twos, too_many, input, output).find("recv_counts sum to"), std::string::npos);
  std::vector<int64_t> negative = twos;
  negative[0] = -1;  // refused before the sums are compared
  EXPECT_NE(message(negative, twos, input, output).find("must be >= 0"), std::string::npos);
  OwnedTensor bf16({2 * n}, DType::BF16);
  EXPECT_NE(message(twos, twos, input, bf16).find("both must have one dtype"), std::string::npos);
  EXPECT_NE(message(twos, twos, input, input).find("overlaps"), std::string::npos);
}

TEST(MpiCommunicator, AllToAllVBeyondIntCountsIsUnsupported) {
  // Never dereferenced: the layout is refused before MPI sees it. 2^31 elements to this rank
  // itself do not fit MPI's int count.
  Communicator& comm = world();
  const int64_t big = int64_t{1} << 31;
  std::vector<int64_t> counts(comm.size(), 0);
  counts[comm.rank()] = big;
  auto* base = reinterpret_cast<char*>(uintptr_t{1} << 44);
  zt::Tensor input(base, {big}, DType::F32);
  zt::Tensor output(base + (int64_t{1} << 40), {big}, DType::F32);
  try {
    comm.all_to_all_v(input, output, counts, counts);
    FAIL() << "2^31 elements were accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("split the exchange"), std::string::npos) << e.what();
  }
}

TEST(MpiCommunicator, SendRecvRing) {
  Communicator& comm = world();
  const int next = (comm.rank() + 1) % comm.size();
  const int prev = (comm.rank() + comm.size() - 1) % comm.size();
  OwnedTensor out = filled(DType::F32, 50, comm.rank());
  OwnedTensor in({50}, DType::F32);
  auto recv = comm.recv_async(in, prev, 7);
  auto send = comm.send_async(out, next, 7);
  send->wait();
  recv->wait();
  for (int64_t i = 0; i < 50; ++i) ASSERT_EQ(in->get_f32(i), value(prev, i));
}

TEST(MpiCommunicator, SplitEvenOdd) {
  Communicator& comm = world();
  // Key -rank: the group orders its ranks from the highest world rank down.
  auto group = comm.split(comm.rank() % 2, -comm.rank());
  ASSERT_NE(group, nullptr);
  int members = 0;
  int above = 0;  // same-parity ranks above mine: my position in the reversed order
  float rank_sum = 0;
  for (int r = comm.rank() % 2; r < comm.size(); r += 2) {
    ++members;
    rank_sum += static_cast<float>(r);
    if (r > comm.rank()) ++above;
  }
  EXPECT_EQ(group->size(), members);
  EXPECT_EQ(group->rank(), above);
  EXPECT_EQ(group->timeout(), comm.timeout());
  OwnedTensor t({3}, DType::F32);
  t->fill_f32(static_cast<float>(comm.rank()));
  group->all_reduce(t, ReduceOp::Sum);
  EXPECT_EQ(t->get_f32(2), rank_sum);

  // Rank 0 in no group: nullptr there; the others form one group without it.
  auto rest = comm.split(comm.rank() == 0 ? Communicator::kNoColor : 0, comm.rank());
  if (comm.rank() == 0) {
    EXPECT_EQ(rest, nullptr);
  } else {
    ASSERT_NE(rest, nullptr);
    EXPECT_EQ(rest->size(), comm.size() - 1);
    EXPECT_EQ(rest->rank(), comm.rank() - 1);
    rest->barrier();
  }
}

TEST(MpiCommunicator, AsyncHandlesCompleteInAnyOrder) {
  Communicator& comm = world();
  const int64_t n = 4096;
  OwnedTensor a = filled(DType::F32, n, comm.rank());
  OwnedTensor b = filled(DType::F32, n * comm.size(), comm.rank());
  OwnedTensor b_out({n}, DType::F32);
  OwnedTensor c_in = filled(DType::F32, n, comm.rank());
  OwnedTensor c_out({n * comm.size()}, DType::F32);
  auto wa = comm.all_reduce_async(a, ReduceOp::Max);
  auto wb = comm.reduce_scatter_async(b, b_out);
  auto wc = comm.all_gather_async(c_in, c_out);
  wc->wait();
  wb->wait(Seconds(30));
  wa->wait();
  EXPECT_TRUE(wa->is_completed());
  EXPECT_TRUE(wb->is_completed());
  float expected_max = value(0, 5);
  float expected_sum = 0;
  for (int r = 0; r < comm.size(); ++r) {
    expected_max = std::max(expected_max, value(r, 5));
    expected_sum += value(r, comm.rank() * n + 5);
  }
  EXPECT_EQ(a->get_f32(5), expected_max);
  EXPECT_EQ(b_out->get_f32(5), expected_sum);
  EXPECT_EQ(c_out->get_f32((comm.size() - 1) * n + 5), value(comm.size() - 1, 5));
}

TEST(MpiCommunicator, BadArgumentsFailLocallyWithoutCommunicating) {
  Communicator& comm = world();
  OwnedTensor in({10 * comm.size() + 1}, DType::F32);
  OwnedTensor out({10}, DType::F32);
  EXPECT_THROW(comm.reduce_scatter(in, out), zt::Error);
  float host[4] = {};
  zt::Tensor device(host, {4}, DType::F32, zt::Device::cuda(0), "grad");
  try {
    comm.all_reduce(device, ReduceOp::Sum);
    FAIL() << "a device tensor was accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'grad'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm.send(out, comm.size(), 0), zt::Error);
}

TEST(MpiCommunicator, TimeoutNamesOperationAndRank) {
  Communicator& comm = world();
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // A communicator of its own with ZT_COLLECTIVE_TIMEOUT_S=1; collective over the world.
  setenv("ZT_COLLECTIVE_TIMEOUT_S", "1", 1);
  auto quick = MpiCommunicator::world();
  unsetenv("ZT_COLLECTIVE_TIMEOUT_S");
  ASSERT_EQ(quick->timeout(), Seconds(1));
  OwnedTensor t({8}, DType::F32);
  t->fill_f32(1.0f);
  if (quick->rank() == 1) {
    // Joins late (after the others' deadline) so that their pending collective completes
    // and the job ends normally.
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    quick->all_reduce_async(t, ReduceOp::Sum)->wait(Seconds(60));
  } else {
    auto work = quick->all_reduce_async(t, ReduceOp::Sum);
    const auto start = std::chrono::steady_clock::now();
    try {
      work->wait();
      FAIL() << "all_reduce completed without rank 1";
    } catch (const zt::Error& e) {
      const Seconds elapsed = std::chrono::steady_clock::now() - start;
      const std::string message = e.what();
      EXPECT_NE(message.find("all_reduce(sum, f32, 8 elements) timed out"), std::string::npos) << message;
      EXPECT_NE(message.find(zt::str("on rank ", quick->rank(), " of ", quick->size())), std::string::npos) << message;
      EXPECT_GE(elapsed.count(), 1.0);
      EXPECT_LT(elapsed.count(), 2.5);
    }
    EXPECT_FALSE(work->is_completed());
    work->wait(Seconds(60));
  }
  EXPECT_EQ(t->get_f32(7), static_cast<float>(quick->size()));
}

}  // namespace
