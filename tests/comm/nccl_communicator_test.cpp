// NcclCommunicator under mpirun at 1, 2 and 4 ranks (CTest dist.np1/np2/np4), bootstrapped
// over the MPI world, one GPU per rank: the same checks as mpi_communicator_test.cpp on device
// buffers. Every test skips unless this machine has at least as many GPUs as there are ranks
// (so all of them skip on the CPU-only CI); in a build without NCCL only the Unsupported error
// is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "core/tensor.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"

#if ZT_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace {
using zt::Device;
using zt::DType;
using zt::OwnedTensor;
using zt::comm::Communicator;
using zt::comm::MpiCommunicator;
using zt::comm::ReduceOp;
using zt::comm::Seconds;

MpiCommunicator& mpi_world() {
  static std::unique_ptr<MpiCommunicator> comm = MpiCommunicator::world();
  return *comm;
}

#if !ZT_WITH_NCCL

TEST(NcclCommunicator, WithoutNcclTheWorldIsUnsupported) {
  try {
    zt::comm::make_nccl_world_communicator(mpi_world());
    FAIL() << "an NCCL communicator was made in a build without NCCL";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported) << e.what();
  }
}

#else

using zt::comm::NcclCommunicator;

// The NCCL world, made on first use over the MPI world and released before MPI ends (by the
// environment below), not at static destruction.
std::unique_ptr<Communicator>& nccl_slot() {
  static std::unique_ptr<Communicator> comm;
  return comm;
}

class ReleaseNccl : public ::testing::Environment {
 public:
  void TearDown() override { nccl_slot().reset(); }
};
[[maybe_unused]] ::testing::Environment* const kReleaseNccl = ::testing::AddGlobalTestEnvironment(new ReleaseNccl);

// Same decision on every rank of one machine: the GPUs are counted, not probed.
bool enough_gpus() { return zt::cuda::device_count() >= mpi_world().size(); }

#define ZT_REQUIRE_GPU_PER_RANK()                                                                                  \
  do {                                                                                                             \
    if (!enough_gpus())                                                                                            \
      GTEST_SKIP() << "needs a GPU per rank: " << zt::cuda::device_count() << " GPU(s) for " << mpi_world().size() \
                   << " ranks";                                                                                    \
  } while (0)

Communicator& world() {
  auto& comm = nccl_slot();
  if (!comm) comm = zt::comm::make_nccl_world_communicator(mpi_world());
  return *comm;
}

Device gpu() { return Device::cuda(zt::cuda::current_device()); }

// Rank r's element i: as in mpi_communicator_test.cpp (multiples of 0.5 up to 56, exact in
// every dtype; sums over 4 ranks stay exact in bf16).
float value(int r, int64_t i) {
  const float v = 0.5f * static_cast<float>((r + 1) * (i % 7 + 1));
  return ((r + i) % 3 == 0) ? -v : v;
}

float element(DType dt, int r, int64_t i) { return zt::is_floating(dt) ? value(r, i) : 2 * value(r, i); }

OwnedTensor filled(DType dt, int64_t n, int r, int64_t offset = 0) {
  OwnedTensor h({n}, dt);
  for (int64_t i = 0; i < n; ++i) h->set_f32(i, element(dt, r, offset + i));
  OwnedTensor d({n}, dt, gpu());
  if (h->nbytes()) zt::cuda::copy_to_device(d->data(), h->data(), h->nbytes());
  return d;
}

OwnedTensor zeros(DType dt, int64_t n) { return OwnedTensor::zeros({n}, dt, gpu()); }

OwnedTensor host(const zt::Tensor& device) {
  OwnedTensor h(device.shape(), device.dtype());
  if (device.nbytes()) zt::cuda::copy_to_host(h->data(), device.data(), device.nbytes());
  return h;
}

class NcclAllReduce : public ::testing::TestWithParam<DType> {};

TEST_P(NcclAllReduce, SumAndMaxMatchLocalReduction) {
  ZT_REQUIRE_GPU_PER_RANK();
  const DType dt = GetParam();
  Communicator& comm = world();
  const int64_t n = 1000;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    OwnedTensor t = filled(dt, n, comm.rank());
    comm.all_reduce(t, op);
    OwnedTensor h = host(t);
    for (int64_t i = 0; i < n; ++i) {
      float expected = element(dt, 0, i);
      for (int r = 1; r < comm.size(); ++r) {
        expected = op == ReduceOp::Sum ? expected + element(dt, r, i) : std::max(expected, element(dt, r, i));
      }
      ASSERT_EQ(h->get_f32(i), expected) << zt::dtype_name(dt) << " " << zt::comm::reduce_op_name(op) << " i=" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclAllReduce,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64),
                         [](const auto& info) { return std::string(zt::dtype_name(info.param)); });

TEST(NcclCommunicator, WorldMatchesMpi) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  EXPECT_EQ(comm.rank(), mpi_world().rank());
  EXPECT_EQ(comm.size(), mpi_world().size());
  EXPECT_EQ(comm.backend_name(), "nccl");
}

TEST(NcclCommunicator, ReduceScatterEqualsAllReduceSlice) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    const int64_t n = 333;
    OwnedTensor input = filled(dt, n * comm.size(), comm.rank());
    OwnedTensor reduced = filled(dt, n * comm.size(), comm.rank());
    OwnedTensor output = zeros(dt, n);
    comm.reduce_scatter(input, output);
    comm.all_reduce(reduced, ReduceOp::Sum);
    OwnedTensor out = host(output);
    OwnedTensor all = host(reduced);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out->get_f32(i), all->get_f32(comm.rank() * n + i)) << zt::dtype_name(dt) << " i=" << i;
    }
  }
}

TEST(NcclCommunicator, AllGatherSeparateAndInPlace) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  const int64_t n = 257;
  OwnedTensor input = filled(DType::BF16, n, comm.rank());
  OwnedTensor output = zeros(DType::BF16, n * comm.size());
  comm.all_gather(input, output);
  OwnedTensor in_place = zeros(DType::BF16, n * comm.size());
  const zt::Tensor mine = in_place->narrow(0, comm.rank() * n, n);
  zt::cuda::copy_on_device(mine.data(), input->data(), input->nbytes());
  comm.all_gather(mine, in_place);
  OwnedTensor separate = host(output);
  OwnedTensor gathered = host(in_place);
  for (int r = 0; r < comm.size(); ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const float expected = zt::to_f32(zt::to_bf16(value(r, i)));
      ASSERT_EQ(separate->get_f32(r * n + i), expected) << "r=" << r << " i=" << i;
      ASSERT_EQ(gathered->get_f32(r * n + i), expected) << "r=" << r << " i=" << i;
    }
  }
}

TEST(NcclCommunicator, BroadcastFromLastRank) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  const int root = comm.size() - 1;
  OwnedTensor t = filled(DType::I64, 100, comm.rank());
  comm.broadcast(t, root);
  OwnedTensor h = host(t);
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(h->get_f32(i), element(DType::I64, root, i));
}

TEST(NcclCommunicator, SendRecvRing) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  const int next = (comm.rank() + 1) % comm.size();
  const int prev = (comm.rank() + comm.size() - 1) % comm.size();
  OwnedTensor out = filled(DType::F32, 50, comm.rank());
  OwnedTensor in = zeros(DType::F32, 50);
  // Both posted before either is waited for: launched together in one NCCL group.
  auto recv = comm.recv_async(in, prev, 7);
  auto send = comm.send_async(out, next, 7);
  send->wait();
  recv->wait();
  OwnedTensor h = host(in);
  for (int64_t i = 0; i < 50; ++i) ASSERT_EQ(h->get_f32(i), value(prev, i));
}

// As in mpi_communicator_test.cpp: rank r sends count(r, p) elements (zeros included) to peer
// p, element j tagged (r, p, j), exact in bf16.
int64_t a2a_count(int r, int p) { return (3 * r + 5 * p + 1) % 4 * 3; }
float a2a_tag(int r, int p, int64_t j) { return static_cast<float>(64 * r + 16 * p + j); }

TEST(NcclCommunicator, AllToAllVUnevenCountsMatchReference) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  const int me = comm.rank();
  for (DType dt : {DType::F32, DType::BF16, DType::I32}) {
    std::vector<int64_t> send_counts, recv_counts;
    int64_t n_in = 0, n_out = 0;
    for (int p = 0; p < comm.size(); ++p) {
      send_counts.push_back(a2a_count(me, p));
      recv_counts.push_back(a2a_count(p, me));
      n_in += send_counts.back();
      n_out += recv_counts.back();
    }
    OwnedTensor h({n_in}, dt);
    int64_t i = 0;
    for (int p = 0; p < comm.size(); ++p) {
      for (int64_t j = 0; j < send_counts[p]; ++j) h->set_f32(i++, a2a_tag(me, p, j));
    }
    OwnedTensor input({n_in}, dt, gpu());
    if (h->nbytes()) zt::cuda::copy_to_device(input->data(), h->data(), h->nbytes());
    OwnedTensor output = zeros(dt, n_out);
    comm.all_to_all_v(input, output, send_counts, recv_counts);
    OwnedTensor got = host(output);
    int64_t o = 0;
    for (int p = 0; p < comm.size(); ++p) {
      for (int64_t j = 0; j < recv_counts[p]; ++j, ++o) {
        ASSERT_EQ(got->get_f32(o), a2a_tag(p, me, j)) << zt::dtype_name(dt) << " from rank " << p << " j=" << j;
      }
    }
  }
}

TEST(NcclCommunicator, SplitEvenOdd) {
  ZT_REQUIRE_GPU_PER_RANK();
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
  OwnedTensor h({3}, DType::F32);
  h->fill_f32(static_cast<float>(comm.rank()));
  OwnedTensor t = zeros(DType::F32, 3);
  zt::cuda::copy_to_device(t->data(), h->data(), h->nbytes());
  group->all_reduce(t, ReduceOp::Sum);
  EXPECT_EQ(host(t)->get_f32(2), rank_sum);

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
  comm.barrier();
}

TEST(NcclCommunicator, AsyncHandlesCompleteInAnyOrder) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  const int64_t n = 4096;
  OwnedTensor a = filled(DType::F32, n, comm.rank());
  OwnedTensor b = filled(DType::F32, n * comm.size(), comm.rank());
  OwnedTensor b_out = zeros(DType::F32, n);
  OwnedTensor c_in = filled(DType::F32, n, comm.rank());
  OwnedTensor c_out = zeros(DType::F32, n * comm.size());
  auto wa = comm.all_reduce_async(a, ReduceOp::Max);
  auto wb = comm.reduce_scatter_async(b, b_out);
  auto wc = comm.all_gather_async(c_in, c_out);
  wc->wait();
  wb->wait(Seconds(30));
  NcclCommunicator::order_before_compute(*wa);
  float expected_max = value(0, 5);
  float expected_sum = 0;
  for (int r = 0; r < comm.size(); ++r) {
    expected_max = std::max(expected_max, value(r, 5));
    expected_sum += value(r, comm.rank() * n + 5);
  }
  EXPECT_EQ(host(a)->get_f32(5), expected_max);  // on the compute stream, after wa
  EXPECT_TRUE(wa->is_completed());
  EXPECT_TRUE(wb->is_completed());
  EXPECT_EQ(host(b_out)->get_f32(5), expected_sum);
  EXPECT_EQ(host(c_out)->get_f32((comm.size() - 1) * n + 5), value(comm.size() - 1, 5));
}

TEST(NcclCommunicator, BadArgumentsFailLocallyWithoutCommunicating) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  OwnedTensor in = zeros(DType::F32, 10 * comm.size() + 1);
  OwnedTensor out = zeros(DType::F32, 10);
  EXPECT_THROW(comm.reduce_scatter(in, out), zt::Error);
  OwnedTensor on_host({4}, DType::F32, Device::cpu(), "grad");
  try {
    comm.all_reduce(on_host, ReduceOp::Sum);
    FAIL() << "a host tensor was accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'grad'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm.send(out, comm.size(), 0), zt::Error);
  comm.barrier();
}

TEST(NcclCommunicator, TimeoutNamesOperationAndRankAndAborts) {
  ZT_REQUIRE_GPU_PER_RANK();
  Communicator& comm = world();
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // A communicator of its own (collective over the MPI world), with a 1 s timeout once made.
  auto quick = NcclCommunicator::create(mpi_world(), Seconds(60));
  quick->set_timeout(Seconds(1));
  OwnedTensor t = zeros(DType::F32, 8);
  if (quick->rank() == 1) {
    // Joins after the others gave up and aborted: its all_reduce cannot complete either.
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    EXPECT_THROW(quick->all_reduce_async(t, ReduceOp::Sum)->wait(), zt::Error);
  } else {
    const auto start = std::chrono::steady_clock::now();
    try {
      // The error may come from the start (NCCL connecting to the peers) or from the wait.
      quick->all_reduce_async(t, ReduceOp::Sum)->wait();
      FAIL() << "all_reduce completed without rank 1";
    } catch (const zt::Error& e) {
      const Seconds elapsed = std::chrono::steady_clock::now() - start;
      const std::string message = e.what();
      EXPECT_NE(message.find("all_reduce(sum, f32, 8 elements)"), std::string::npos) << message;
      EXPECT_NE(message.find(zt::str("on rank ", quick->rank(), " of ", quick->size())), std::string::npos) << message;
      EXPECT_NE(message.find("ncclCommAbort"), std::string::npos) << message;
      EXPECT_GE(elapsed.count(), 1.0);
      EXPECT_LT(elapsed.count(), 10.0);  // the timeout plus ncclCommAbort: no hang
    }
    EXPECT_THROW(quick->barrier(), zt::Error);  // aborted: unusable
  }
  quick.reset();
  mpi_world().barrier();  // everyone out of the aborted communicator
}

#endif  // ZT_WITH_NCCL

}  // namespace
