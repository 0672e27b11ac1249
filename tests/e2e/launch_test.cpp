// `zerotrain launch` from the shell: --dry-run prints the command, two ranks under mpirun
// see their RANK/LOCAL_RANK/WORLD_SIZE, --max-restarts reruns a failed job, a hostfile that
// disagrees with --num_processes exits 2, SIGTERM reaches the job, and a failing rank ends
// the whole job. Tests that need mpirun skip without it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/shell.h"
#include "common/temp_dir.h"

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

using Result = zt::testing::ShellResult;
using zt::testing::sh;

const std::string& kMpiEnv = zt::testing::kMpirunEnv;

std::string zerotrain() { return std::string(ZT_BINARY_DIR) + "/zerotrain"; }

using zt::testing::have_mpirun;

// This file's per-test scratch directory: build/test_tmp/launch_e2e_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("launch_e2e_")) {}
};

class LaunchCli : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::access(zerotrain().c_str(), X_OK), 0) << "build the zerotrain target first"; }
};

TEST_F(LaunchCli, DryRunPrintsTheMpirunCommand) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  const Result r = sh(zerotrain() +
                      " launch --dry-run --num_processes 2 --main_process_port 29600 -- zerotrain train "
                      "run.yaml --max_steps 5");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "mpirun -np 2 ");
  EXPECT_HAS(r.out, "--host localhost:2");
  EXPECT_HAS(r.out, "-x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29600");
  EXPECT_HAS(r.out, "/zerotrain launch --rank-env -- zerotrain train run.yaml --max_steps 5\n");
}

TEST_F(LaunchCli, DryRunOfOneProcessIsTheCommandItself) {
  const Result r = sh(zerotrain() + " launch --dry-run echo 'a b'");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 ");
  EXPECT_HAS(r.out, " echo 'a b'\n");
}

TEST_F(LaunchCli, HostfileNotMatchingNumProcessesExits2NamingTheFile) {
  TempDir dir;
  const std::string hostfile = dir.write("hostfile", "node-a slots=2\nnode-b slots=2\n");
  const Result r = sh(zerotrain() + " launch --dry-run --hostfile " + hostfile + " --num_processes 8 -- echo hi");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, hostfile + ": the slots add up to 4 processes");
  EXPECT_HAS(r.out, "set --num_processes to 4");
}

TEST_F(LaunchCli, UnknownOptionSuggestsTheRightOne) {
  const Result r = sh(zerotrain() + " launch --nproc-per-nod 2 -- echo hi");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "did you mean --nproc-per-node?");
}

TEST_F(LaunchCli, TwoRanksSeeTheirRankVariables) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  const Result r = sh(kMpiEnv + zerotrain() +
                      " launch --nproc-per-node 2 -- sh -c "
                      "'echo rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE "
                      "master=$MASTER_ADDR:$MASTER_PORT restarts=$ZT_RESTART_COUNT'");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "rank=0 local=0 world=2 master=127.0.0.1:29500 restarts=0");
  EXPECT_HAS(r.out, "rank=1 local=1 world=2 master=127.0.0.1:29500 restarts=0");
}

TEST_F(LaunchCli, MaxRestartsRerunsAFailedJob) {
  TempDir dir;
  // Fails the first time (leaving a marker), succeeds the second.
  const std::string marker = dir.file("failed_once");
  const std::string job =
      "'echo attempt=$ZT_RESTART_COUNT; if [ -e " + marker + " ]; then exit 0; fi; touch " + marker + "; exit 3'";
  const Result r = sh(zerotrain() + " launch --max-restarts 2 -- sh -c " + job);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "attempt=0");
  EXPECT_HAS(r.out, "zerotrain launch: job exited with code 3; restart 1/2 from the latest checkpoint");
  EXPECT_HAS(r.out, "attempt=1");
  EXPECT_EQ(r.out.find("restart 2/2"), std::string::npos) << r.out;
}

TEST_F(LaunchCli, WithoutRestartsAFailedJobsCodeIsReturned) {
  TempDir dir;
  const std::string marker = dir.file("failed_once");
  const Result r = sh(zerotrain() + " launch --max-restarts 0 -- sh -c 'if [ -e " + marker +
                      " ]; then exit 0; fi; touch " + marker + "; exit 3'");
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_EQ(r.out.find("restart"), std::string::npos) << r.out;
}

TEST_F(LaunchCli, RestartsUnderMpirun) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  TempDir dir;
  // Rank 1 fails on the first attempt only.
  const std::string marker = dir.file("failed_once");
  const std::string job = "'if [ $RANK = 1 ] && [ ! -e " + marker + " ]; then touch " + marker +
                          "; exit 4; fi; echo done rank=$RANK attempt=$ZT_RESTART_COUNT'";
  const Result r = sh(kMpiEnv + zerotrain() + " launch --nproc-per-node 2 --max-restarts 1 -- sh -c " + job);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "restart 1/1 from the latest checkpoint");
  EXPECT_HAS(r.out, "done rank=0 attempt=1");
  EXPECT_HAS(r.out, "done rank=1 attempt=1");
}

TEST_F(LaunchCli, SigtermIsForwardedToTheJobAndNotRestarted) {
  TempDir dir;
  const std::string ready = dir.file("ready");
  // The job traps SIGTERM and exits 5; the launcher must pass the signal on, wait, and
  // return 5 without a restart although restarts are allowed.
  const std::string job =
      "'trap \"echo job got TERM; exit 5\" TERM; touch " + ready + "; while :; do sleep 0.05; done'";
  const std::string script =
      dir.write("signal.sh", zerotrain() + " launch --max-restarts 3 -- sh -c " + job + " &\npid=$!\nwhile [ ! -e " +
                                 ready + " ]; do sleep 0.05; done\nkill -TERM $pid\nwait $pid\necho launcher=$?\n");
  const Result r = sh("sh " + script);
  EXPECT_HAS(r.out, "job got TERM");
  EXPECT_HAS(r.out, "launcher=5");
  EXPECT_EQ(r.out.find("restart"), std::string::npos) << r.out;
}

TEST_F(LaunchCli, AFailingRankEndsTheWholeJob) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  // Every rank runs a command that fails with bad input; main ends the job, naming the rank.
  const Result r = sh(kMpiEnv + zerotrain() + " launch --nproc-per-node 2 -- " + zerotrain() + " no-such-command");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "of 2: error: unknown command 'no-such-command'");
}

}  // namespace
