// ZeRO-Offload with several ranks on one machine (train/rank_binding.h): each rank binds to
// its own block of cores in one NUMA node and caps its threads to it. On CPU ranks under
// mpirun (not bound by the launcher): every rank's allowed CPUs are its block afterwards,
// the blocks of ranks sharing no more than the machine's cores are disjoint, and
// ZT_CPU_BIND=none leaves the process alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/cpu_topology.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "train/rank_binding.h"

namespace {

using namespace zt;

comm::Communicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> comm = comm::MpiCommunicator::world();
  return *comm;
}

config::TrainConfig offload_config() {
  config::TrainConfig c;
  c.zero.stage = 2;
  c.zero.offload_optimizer.device = config::OffloadDevice::CPU;
  return c;
}

// Restores the process's CPUs and thread count at the end of a test.
struct AffinityGuard {
  std::vector<int> cpus = allowed_cpus();
  int threads = num_threads();
  ~AffinityGuard() {
    bind_process_to(cpus, nullptr);
    set_num_threads(threads);
  }
};

TEST(RankBinding, EachRankGetsItsOwnBlock) {
  comm::Communicator& comm = world();
  const int W = comm.size(), r = comm.rank();
  const bool restricted = process_is_restricted();
  const CpuTopology before = read_cpu_topology();
  AffinityGuard guard;
  const std::string line = train::bind_rank_for_host_work(offload_config(), r, W);
  if (W == 1 || restricted) {
    EXPECT_EQ(line, "") << "one rank, or a process its launcher bound: left alone";
    EXPECT_EQ(allowed_cpus(), guard.cpus);
    return;
  }
  ASSERT_NE(line, "");
  const RankCpus want = rank_cpus(before, r, W);
  EXPECT_EQ(allowed_cpus(), want.cpus) << line;
  EXPECT_LE(num_threads(), static_cast<int>(want.cpus.size())) << line;
  EXPECT_NE(line.find(format_cpu_list(want.cpus)), std::string::npos) << line;
  // Every rank's block, gathered as a 0/1 mask over the first 256 CPUs.
  constexpr int kCpus = 256;
  OwnedTensor mine({kCpus}, DType::F32), all({static_cast<int64_t>(W) * kCpus}, DType::F32);
  for (int c = 0; c < kCpus; ++c) mine.data<float>()[c] = 0.0f;
  for (int c : allowed_cpus())
    if (c < kCpus) mine.data<float>()[c] = 1.0f;
  comm.all_gather(mine, all);
  if (W <= static_cast<int>(guard.cpus.size())) {
    for (int c = 0; c < kCpus; ++c) {
      int owners = 0;
      for (int q = 0; q < W; ++q) owners += all.data<float>()[q * kCpus + c] > 0.5f ? 1 : 0;
      EXPECT_LE(owners, 1) << "CPU " << c << " is in " << owners << " ranks' blocks";
    }
  }
}

TEST(RankBinding, NoneLeavesTheProcessAlone) {
  AffinityGuard guard;
  ::setenv("ZT_CPU_BIND", "none", 1);
  const std::string line = train::bind_rank_for_host_work(offload_config(), world().rank(), std::max(2, world().size()));
  ::unsetenv("ZT_CPU_BIND");
  EXPECT_EQ(line, "");
  EXPECT_EQ(allowed_cpus(), guard.cpus);
  // Without offload there is no host work to place.
  config::TrainConfig plain;
  EXPECT_EQ(train::bind_rank_for_host_work(plain, world().rank(), std::max(2, world().size())), "");
}

}  // namespace
