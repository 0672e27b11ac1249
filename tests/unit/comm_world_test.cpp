// comm/world.h's choice of the device communicator: ZT_DEVICE_COMM's values, which ranks
// share a GPU from their UUIDs, and the error without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda_api.h"
#include "common/scoped_env.h"
#include "comm/single.h"
#include "comm/world.h"
#include "core/error.h"

namespace {
using zt::comm::device_comm_choice;
using zt::comm::device_sharing;
using zt::comm::DeviceCommChoice;

TEST(DeviceCommChoice, ValuesOfZtDeviceComm) {
  EXPECT_EQ(device_comm_choice(nullptr), DeviceCommChoice::Auto);
  EXPECT_EQ(device_comm_choice(""), DeviceCommChoice::Auto);
  EXPECT_EQ(device_comm_choice("auto"), DeviceCommChoice::Auto);
  EXPECT_EQ(device_comm_choice("nccl"), DeviceCommChoice::Nccl);
  EXPECT_EQ(device_comm_choice("staged"), DeviceCommChoice::Staged);
  for (const char* bad : {"NCCL", "mpi", "staged ", "1"}) {
    try {
      device_comm_choice(bad);
      FAIL() << bad << " was accepted";
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput);
      const std::string m = e.what();
      EXPECT_NE(m.find("ZT_DEVICE_COMM"), std::string::npos) << m;
      EXPECT_NE(m.find("auto"), std::string::npos) << m;
      EXPECT_NE(m.find("staged"), std::string::npos) << m;
    }
  }
  zt::testing::ScopedEnv env("ZT_DEVICE_COMM", "staged");
  EXPECT_EQ(zt::comm::device_comm_choice_from_env(), DeviceCommChoice::Staged);
}

TEST(DeviceSharing, FromEveryRanksGpuUuid) {
  auto s = device_sharing({"GPU-a"});
  EXPECT_FALSE(s.any_shared);
  EXPECT_EQ(s.ranks_on_rank0_device, 1);
  s = device_sharing({"GPU-a", "GPU-b", "GPU-c", "GPU-d"});  // one GPU per rank: NCCL
  EXPECT_FALSE(s.any_shared);
  EXPECT_EQ(s.first, -1);
  s = device_sharing({"GPU-a", "GPU-a"});  // mpirun -np 2 on a machine with one GPU
  EXPECT_TRUE(s.any_shared);
  EXPECT_EQ(s.ranks_on_rank0_device, 2);
  EXPECT_EQ(s.first, 0);
  EXPECT_EQ(s.second, 1);
  s = device_sharing({"GPU-a", "GPU-b", "GPU-a", "GPU-b"});  // 4 ranks on 2 GPUs
  EXPECT_TRUE(s.any_shared);
  EXPECT_EQ(s.ranks_on_rank0_device, 2);
  EXPECT_EQ(s.second, 2);
  s = device_sharing({"GPU-a", "GPU-b", "GPU-c", "GPU-c"});  // rank 0's GPU is its own
  EXPECT_TRUE(s.any_shared);
  EXPECT_EQ(s.ranks_on_rank0_device, 1);
  EXPECT_EQ(s.first, 2);
  EXPECT_EQ(s.second, 3);
}

TEST(DeviceWorldCommunicator, WithoutAGpuIsUnsupported) {
  if (zt::cuda::available()) GTEST_SKIP() << "a GPU is visible (tests/cuda/staged_device_communicator_test.cpp)";
  zt::comm::SingleCommunicator single;
  try {
    zt::comm::make_device_world_communicator(single);
    FAIL() << "a device communicator was made without a GPU";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
  }
}

TEST(DeviceWorldCommunicator, BadSettingIsRefusedFirst) {
  zt::testing::ScopedEnv env("ZT_DEVICE_COMM", "fast");
  zt::comm::SingleCommunicator single;
  try {
    zt::comm::make_device_world_communicator(single);
    FAIL() << "ZT_DEVICE_COMM=fast was accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput) << e.what();
  }
}

}  // namespace
