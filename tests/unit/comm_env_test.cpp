// dist/env.h: rank variables of torchrun, OpenMPI, PMI and SLURM, their precedence and
// errors, and ZT_COLLECTIVE_TIMEOUT_S.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "comm/env.h"

namespace {
using zt::comm::collective_timeout_from_env;
using zt::comm::read_launch_env;

zt::comm::EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnv, NoLauncherIsRankZeroOfOne) {
  const auto env = read_launch_env(env_of({}));
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.source, "default");
}

TEST(LaunchEnv, EachLauncher) {
  auto env = read_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "5"},
                                     {"OMPI_COMM_WORLD_SIZE", "8"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
  EXPECT_EQ(env.source, "openmpi");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  env = read_launch_env(env_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}}));
  EXPECT_EQ(env.source, "pmi");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.local_rank, 0);
  env = read_launch_env(env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
}

TEST(LaunchEnv, TorchrunThenMpiThenSlurm) {
  // mpirun inside a SLURM allocation: OpenMPI's variables are the ones that are right.
  auto env = read_launch_env(env_of(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(env.source, "openmpi");
  EXPECT_EQ(env.rank, 1);
  env = read_launch_env(env_of({{"RANK", "3"},
                                {"WORLD_SIZE", "4"},
                                {"LOCAL_RANK", "3"},
                                {"OMPI_COMM_WORLD_RANK", "0"},
                                {"OMPI_COMM_WORLD_SIZE", "1"}}));
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 3);
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  for (const auto& vars :
       std::vector<std::map<std::string, std::string>>{{{"RANK", "x"}, {"WORLD_SIZE", "2"}},
                                                       {{"RANK", "2"}, {"WORLD_SIZE", "2"}},
                                                       {{"RANK", "0"}},
                                                       {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}}}) {
    try {
      read_launch_env(env_of(vars));
      FAIL() << "accepted " << vars.begin()->first;
    } catch (const zt::Error& e) {
      EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
    }
  }
}

TEST(CollectiveTimeout, DefaultAndOverride) {
  EXPECT_EQ(collective_timeout_from_env(env_of({})).count(), 300.0);
  EXPECT_EQ(collective_timeout_from_env(env_of({{"ZT_COLLECTIVE_TIMEOUT_S", "1.5"}})).count(), 1.5);
  for (const char* bad : {"0", "-3", "abc", "5s", "inf"}) {
    EXPECT_THROW(collective_timeout_from_env(env_of({{"ZT_COLLECTIVE_TIMEOUT_S", bad}})), zt::Error) << bad;
  }
}

}  // namespace
