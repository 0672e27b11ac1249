// SingleCommunicator (dist/single.h): the N = 1 semantics of every collective, the
// self-mailbox for send/recv, and its argument errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda_api.h"

#include "core/error.h"
#include "core/tensor.h"
#include "comm/abort.h"
#include "comm/single.h"

namespace {
using zt::DType;
using zt::OwnedTensor;
using zt::comm::Communicator;
using zt::comm::ReduceOp;
using zt::comm::SingleCommunicator;

OwnedTensor iota(int64_t n, DType dt, float offset = 0) {
  OwnedTensor t({n}, dt);
  for (int64_t i = 0; i < n; ++i) t->set_f32(i, offset + static_cast<float>(i));
  return t;
}

TEST(SingleCommunicator, CollectivesKeepOrCopyValues) {
  SingleCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  OwnedTensor t = iota(5, DType::BF16, 1);
  comm.all_reduce(t, ReduceOp::Sum);
  comm.all_reduce(t, ReduceOp::Max);
  comm.broadcast(t, 0);
  EXPECT_EQ(t->get_f32(4), 5.0f);

  OwnedTensor out({5}, DType::BF16);
  out->zero();
  comm.reduce_scatter(t, out);
  EXPECT_EQ(out->get_f32(3), 4.0f);
  OwnedTensor gathered({5}, DType::BF16);
  gathered->zero();
  auto work = comm.all_gather_async(t, gathered);
  EXPECT_TRUE(work->is_completed());
  work->wait();
  EXPECT_EQ(gathered->get_f32(2), 3.0f);
  comm.barrier();
}

TEST(SingleCommunicator, SendToSelfThenReceiveInOrderPerTag) {
  SingleCommunicator comm;
  OwnedTensor a = iota(3, DType::I32, 10);
  OwnedTensor b = iota(3, DType::I32, 20);
  comm.send(a, 0, 1);
  comm.send(b, 0, 1);
  comm.send(b, 0, 2);
  OwnedTensor got({3}, DType::I32);
  comm.recv(got, 0, 2);
  EXPECT_EQ(got->get_f32(0), 20.0f);
  comm.recv(got, 0, 1);
  EXPECT_EQ(got->get_f32(0), 10.0f);
  comm.recv(got, 0, 1);
  EXPECT_EQ(got->get_f32(2), 22.0f);
  // Nothing left with tag 1: an error, not a hang.
  EXPECT_THROW(comm.recv(got, 0, 1), zt::Error);
  OwnedTensor small({2}, DType::I32);
  comm.send(a, 0, 3);
  EXPECT_THROW(comm.recv(small, 0, 3), zt::Error);
}

TEST(SingleCommunicator, RejectsBadArguments) {
  SingleCommunicator comm;
  OwnedTensor in({4}, DType::F32);
  OwnedTensor out({3}, DType::F32);
  EXPECT_THROW(comm.reduce_scatter(in, out), zt::Error);
  EXPECT_THROW(comm.all_gather(out, in), zt::Error);
  OwnedTensor other({4}, DType::F16);
  EXPECT_THROW(comm.all_gather(in, other), zt::Error);
  EXPECT_THROW(comm.broadcast(in, 1), zt::Error);
  EXPECT_THROW(comm.send(in, 1, 0), zt::Error);
  // Device buffers are accepted (a single-GPU run uses this communicator); without a GPU
  // the copy they need fails clearly.
  if (!zt::cuda::available()) {
    float host[4] = {}, host_out[4] = {};
    zt::Tensor device(host, {4}, DType::F32, zt::Device::cuda(0), "g");
    zt::Tensor device_out(host_out, {4}, DType::F32, zt::Device::cuda(0), "o");
    try {
      comm.all_gather(device, device_out);
      FAIL() << "a device copy ran without a GPU";
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported);
    }
  }
  OwnedTensor matrix({4, 4}, DType::F32);
  EXPECT_THROW(comm.all_reduce(matrix->narrow(1, 0, 2), ReduceOp::Sum), zt::Error);
}

TEST(SingleCommunicator, AllToAllVCopiesToSelfAndChecksCounts) {
  SingleCommunicator comm;
  OwnedTensor in = iota(6, DType::BF16, 1);
  OwnedTensor out({6}, DType::BF16);
  out->zero();
  comm.all_to_all_v(in, out, {6}, {6});
  EXPECT_EQ(out->get_f32(5), 6.0f);
  OwnedTensor empty_in({0}, DType::F32), empty_out({0}, DType::F32);
  EXPECT_TRUE(comm.all_to_all_v_async(empty_in, empty_out, {0}, {0})->is_completed());
  const auto message = [&](const std::vector<int64_t>& sc, const std::vector<int64_t>& rc, const zt::Tensor& o) {
    try {
      comm.all_to_all_v(in, o, sc, rc);
    } catch (const zt::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({5}, {6}, out).find("all_to_all_v: send_counts sum to 5"), std::string::npos);
  EXPECT_NE(message({6}, {7}, out).find("all_to_all_v: recv_counts sum to 7"), std::string::npos);
  EXPECT_NE(message({6, 0}, {6}, out).find("one per rank of the group (1)"), std::string::npos);
  OwnedTensor f32({6}, DType::F32);
  EXPECT_NE(message({6}, {6}, f32).find("one dtype"), std::string::npos);
}

TEST(SingleCommunicator, SplitGivesSingleOrNothing) {
  SingleCommunicator comm;
  auto group = comm.split(3, 0);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(comm.split(Communicator::kNoColor, 0), nullptr);
}

TEST(AbortJobDeathTest, PrintsRankAndExitsNonZero) {
  EXPECT_EXIT(zt::comm::abort_job("collective timed out"), ::testing::ExitedWithCode(1),
              "zerotrain: rank 0 of 1: collective timed out");
}

}  // namespace
