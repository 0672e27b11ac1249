// NcclCommunicator at world size 1 on one GPU (the multi-rank checks are in
// tests/comm/nccl_communicator_test.cpp): every collective keeps its N-rank meaning with
// N = 1 on device buffers, the comm stream is ordered after the compute stream, and a stuck
// operation ends in an error and an abort instead of a hang. Builds in every configuration:
// without NCCL only the Unsupported error is tested; without a GPU the tests skip.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda_api.h"
#include "common/cuda_tensor.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor.h"
#include "comm/single.h"
#include "comm/world.h"

#if ZT_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace {

using zt::Device;
using zt::DType;
using zt::OwnedTensor;
using zt::comm::Communicator;
using zt::comm::ReduceOp;
using zt::comm::Seconds;

#if !ZT_WITH_NCCL

TEST(NcclCommunicator, WithoutNcclTheWorldIsUnsupported) {
  try {
    zt::comm::make_nccl_world_communicator();
    FAIL() << "an NCCL communicator was made in a build without NCCL";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("without NCCL"), std::string::npos) << e.what();
  }
}

#else

using zt::comm::NcclCommunicator;
using zt::testing::to_host;

Device gpu() { return Device::cuda(zt::cuda::current_device()); }

// Element i: multiples of 0.5 (whole numbers for integers), exact in every dtype.
float element(DType dt, int64_t i) {
  const float v = 0.5f * static_cast<float>(i % 13 + 1) * ((i % 3 == 0) ? -1.f : 1.f);
  return zt::is_floating(dt) ? v : 2 * v;
}

OwnedTensor host_filled(DType dt, int64_t n, int64_t offset = 0) {
  OwnedTensor t({n}, dt);
  for (int64_t i = 0; i < n; ++i) t->set_f32(i, element(dt, offset + i));
  return t;
}

// A device copy on this process's GPU.
OwnedTensor device_copy(const zt::Tensor& host) {
  OwnedTensor d(host.shape(), host.dtype(), gpu(), host.name());
  if (host.nbytes()) zt::cuda::copy_to_device(d->data(), host.data(), host.nbytes());
  return d;
}

OwnedTensor device_filled(DType dt, int64_t n, int64_t offset = 0) { return device_copy(host_filled(dt, n, offset)); }

void expect_elements(const zt::Tensor& device, DType dt, int64_t offset, const char* what) {
  OwnedTensor h = to_host(device);
  for (int64_t i = 0; i < h->numel(); ++i) {
    ASSERT_EQ(h->get_f32(i), element(dt, offset + i)) << what << " " << zt::dtype_name(dt) << " i=" << i;
  }
}

std::unique_ptr<Communicator> world() { return zt::comm::make_nccl_world_communicator(); }

TEST(NcclWorld1, WithoutGpuTheWorldIsUnsupported) {
  if (zt::cuda::available()) GTEST_SKIP() << "a GPU is visible";
  try {
    world();
    FAIL() << "an NCCL communicator was made without a GPU";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs a GPU"), std::string::npos) << e.what();
  }
}

TEST(NcclWorld1, MadeWithoutLauncherOrMpi) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend_name(), "nccl");
  EXPECT_GT(comm->timeout().count(), 0.0);
  auto* nccl = dynamic_cast<NcclCommunicator*>(comm.get());
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->device(), zt::cuda::current_device());
}

class NcclAllReduce : public ::testing::TestWithParam<DType> {};

TEST_P(NcclAllReduce, SumAndMaxLeaveTheValues) {
  ZT_REQUIRE_GPU();
  const DType dt = GetParam();
  auto comm = world();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    OwnedTensor t = device_filled(dt, 1000);
    comm->all_reduce(t, op);
    expect_elements(t, dt, 0, zt::comm::reduce_op_name(op));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclAllReduce,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64),
                         [](const auto& info) { return std::string(zt::dtype_name(info.param)); });

TEST(NcclWorld1, ReduceScatterAndAllGatherCopy) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    OwnedTensor input = device_filled(dt, 333);
    OwnedTensor output = OwnedTensor::zeros({333}, dt, gpu());
    comm->reduce_scatter(input, output);
    expect_elements(output, dt, 0, "reduce_scatter");
    OwnedTensor gathered = OwnedTensor::zeros({333}, dt, gpu());
    comm->all_gather(input, gathered);
    expect_elements(gathered, dt, 0, "all_gather");
  }
}

TEST(NcclWorld1, AllGatherInPlace) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  OwnedTensor output = device_filled(DType::BF16, 257);
  const zt::Tensor mine = output->narrow(0, 0, 257);  // rank 0's slice: all of it
  comm->all_gather(mine, output);
  expect_elements(output, DType::BF16, 0, "in-place all_gather");
}

TEST(NcclWorld1, BroadcastKeepsTheRootsValues) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  OwnedTensor t = device_filled(DType::I64, 100);
  comm->broadcast(t, 0);
  expect_elements(t, DType::I64, 0, "broadcast");
  EXPECT_THROW(comm->broadcast(t, 1), zt::Error);
}

TEST(NcclWorld1, SendToSelfThenReceive) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  OwnedTensor out = device_filled(DType::F32, 50);
  OwnedTensor in = OwnedTensor::zeros({50}, DType::F32, gpu());
  // Posted back to back, launched together at the first wait (one NCCL group).
  auto send = comm->send_async(out, 0, 3);
  auto recv = comm->recv_async(in, 0, 3);
  recv->wait();
  send->wait();
  EXPECT_TRUE(send->is_completed());
  expect_elements(in, DType::F32, 0, "recv");
}

TEST(NcclWorld1, AllToAllVCopiesToSelfAndChecksCounts) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  for (DType dt : {DType::F32, DType::BF16, DType::I32}) {
    OwnedTensor input = device_filled(dt, 77);
    OwnedTensor output = OwnedTensor::zeros({77}, dt, gpu());
    comm->all_to_all_v(input, output, {77}, {77});
    expect_elements(output, dt, 0, "all_to_all_v");
  }
  OwnedTensor empty = OwnedTensor::zeros({0}, DType::F32, gpu());
  OwnedTensor empty_out = OwnedTensor::zeros({0}, DType::F32, gpu());
  EXPECT_TRUE(comm->all_to_all_v_async(empty, empty_out, {0}, {0})->is_completed());
  OwnedTensor input = device_filled(DType::F32, 8);
  OwnedTensor output = OwnedTensor::zeros({8}, DType::F32, gpu());
  try {
    comm->all_to_all_v(input, output, {7}, {8});
    FAIL() << "counts that do not cover the input were accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_to_all_v: send_counts sum to 7"), std::string::npos) << e.what();
  }
}

TEST(NcclWorld1, BarrierAndEmptyBuffersComplete) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  comm->barrier();
  auto work = comm->barrier_async();
  work->wait();
  EXPECT_TRUE(work->is_completed());
  OwnedTensor empty({0}, DType::F32, gpu());
  comm->all_reduce(empty, ReduceOp::Sum);
  comm->all_gather(empty, empty);
  comm->broadcast(empty, 0);
}

TEST(NcclWorld1, SplitWithOneColorAndWithNoColor) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  auto group = comm->split(5, 0);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->timeout(), comm->timeout());
  EXPECT_EQ(group->backend_name(), "nccl");
  OwnedTensor t = device_filled(DType::F32, 64);
  group->all_reduce(t, ReduceOp::Sum);
  expect_elements(t, DType::F32, 0, "all_reduce on the group");
  auto nested = group->split(0, 7);
  ASSERT_NE(nested, nullptr);
  nested->barrier();
  EXPECT_EQ(comm->split(Communicator::kNoColor, 0), nullptr);
  // The parent still works after its groups were made.
  comm->all_reduce(t, ReduceOp::Max);
  expect_elements(t, DType::F32, 0, "all_reduce on the parent");
}

TEST(NcclWorld1, CollectiveSeesComputeStreamWorkQueuedBeforeIt) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  const int64_t n = int64_t{1} << 24;  // 64 MiB of f32
  OwnedTensor input = device_filled(DType::F32, n);
  OwnedTensor output = device_filled(DType::F32, n);
  // Keep the compute stream busy (~tens of ms of memsets), then zero the input on it. An
  // all_gather that did not wait for the compute stream would copy the old values.
  zt::Buffer busy(size_t{1} << 30, gpu());
  for (int i = 0; i < 40; ++i) busy.zero();
  input->zero();
  comm->all_gather(input, output);
  OwnedTensor h = to_host(output);
  for (int64_t i = 0; i < n; i += 4093) ASSERT_EQ(h->get_f32(i), 0.f) << "i=" << i;
  ASSERT_EQ(h->get_f32(n - 1), 0.f);
}

TEST(NcclWorld1, OrderBeforeComputeLetsTheComputeStreamWait) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  const int64_t n = int64_t{1} << 22;
  OwnedTensor input = device_filled(DType::BF16, n);
  OwnedTensor output = OwnedTensor::zeros({n}, DType::BF16, gpu());
  auto work = comm->all_gather_async(input, output);
  NcclCommunicator::order_before_compute(*work);
  // The copy to the host runs on the compute stream, after the all_gather.
  OwnedTensor h = to_host(output);
  for (int64_t i = 0; i < n; i += 1021) {
    ASSERT_EQ(h->get_f32(i), element(DType::BF16, i)) << "i=" << i;
  }
  EXPECT_TRUE(work->is_completed());
  // Any other Work is simply waited for.
  zt::comm::CompletedWork done;
  NcclCommunicator::order_before_compute(done);
}

TEST(NcclWorld1, AsyncHandlesCompleteInAnyOrder) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  const int64_t n = 4096;
  OwnedTensor a = device_filled(DType::F32, n);
  OwnedTensor b = device_filled(DType::F32, n, 7);
  OwnedTensor b_out = OwnedTensor::zeros({n}, DType::F32, gpu());
  OwnedTensor c = device_filled(DType::F16, n, 11);
  OwnedTensor c_out = OwnedTensor::zeros({n}, DType::F16, gpu());
  auto wa = comm->all_reduce_async(a, ReduceOp::Max);
  auto wb = comm->reduce_scatter_async(b, b_out);
  auto wc = comm->all_gather_async(c, c_out);
  wc->wait();
  wb->wait(Seconds(30));
  wa->wait();
  EXPECT_TRUE(wa->is_completed());
  EXPECT_TRUE(wb->is_completed());
  expect_elements(a, DType::F32, 0, "all_reduce");
  expect_elements(b_out, DType::F32, 7, "reduce_scatter");
  expect_elements(c_out, DType::F16, 11, "all_gather");
}

TEST(NcclWorld1, BadArgumentsFailWithoutCommunicating) {
  ZT_REQUIRE_GPU();
  auto comm = world();
  OwnedTensor host({8}, DType::F32, Device::cpu(), "grad");
  try {
    comm->all_reduce(host, ReduceOp::Sum);
    FAIL() << "a host tensor was accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("'grad'"), std::string::npos) << e.what();
  }
  OwnedTensor d = device_filled(DType::F32, 8);
  if (zt::cuda::device_count() > 1) {
    const int other = (zt::cuda::current_device() + 1) % zt::cuda::device_count();
    zt::Tensor elsewhere(d->data(), {8}, DType::F32, Device::cuda(other), "w");
    EXPECT_THROW(comm->all_reduce(elsewhere, ReduceOp::Sum), zt::Error);
  }
  OwnedTensor out = OwnedTensor::zeros({4}, DType::F32, gpu());
  EXPECT_THROW(comm->reduce_scatter(d, out), zt::Error);                              // 8 != 1 x 4
  EXPECT_THROW(comm->reduce_scatter(d, d->narrow(0, 0, 8)), zt::Error);               // overlap
  EXPECT_THROW(comm->all_gather(d->narrow(0, 2, 4), d->narrow(0, 0, 4)), zt::Error);  // overlap
  EXPECT_THROW(comm->send(d, 1, 0), zt::Error);
  EXPECT_THROW(comm->send(d, 0, -1), zt::Error);
  // The communicator is still fine.
  comm->all_reduce(d, ReduceOp::Sum);
  expect_elements(d, DType::F32, 0, "all_reduce after bad arguments");
}

TEST(NcclWorld1, StuckOperationTimesOutAndAborts) {
  ZT_REQUIRE_GPU();
  zt::comm::SingleCommunicator bootstrap;
  auto comm = NcclCommunicator::create(bootstrap, Seconds(60));
  comm->set_timeout(Seconds(1));
  EXPECT_EQ(comm->timeout(), Seconds(1));
  // A receive that no send will ever match: NCCL either refuses it or waits forever on the
  // GPU; either way the wait ends with an error and the communicator is aborted.
  OwnedTensor in = OwnedTensor::zeros({8}, DType::F32, gpu());
  const auto start = std::chrono::steady_clock::now();
  try {
    auto recv = comm->recv_async(in, 0, 0);
    recv->wait();
    FAIL() << "a receive without a send completed";
  } catch (const zt::Error& e) {
    const Seconds elapsed = std::chrono::steady_clock::now() - start;
    const std::string message = e.what();
    EXPECT_NE(message.find("recv(f32, 8 elements) from rank 0 tag 0"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 0 of 1"), std::string::npos) << message;
    EXPECT_NE(message.find("abort"), std::string::npos) << message;
    EXPECT_LT(elapsed.count(), 30.0);
  }
  try {
    comm->barrier();
    FAIL() << "an aborted communicator was used";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("aborted earlier"), std::string::npos) << e.what();
  }
}

#endif  // ZT_WITH_NCCL

}  // namespace
