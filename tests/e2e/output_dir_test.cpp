// Who owns an output_dir, through the real `zerotrain train`: a new run into a directory
// holding a run exits 2 and changes nothing; --overwrite_output_dir replaces the old run;
// a run on a directory another run holds exits 2 naming its pid; under mpirun a refused
// directory ends every rank (no rank left waiting); a full disk under metrics.jsonl is a
// warning and the run goes on; a drive too small for final/ and a checkpoint is exit 2 before
// the first step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/shell.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "train/output_dir_lock.h"

namespace fs = std::filesystem;
using zt::testing::file_bytes;
using zt::testing::sh;
using zt::testing::ShellResult;

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

struct OutputDir : ::testing::Test {
  void SetUp() override {
    dir = zt::testing::fresh_test_dir("outdir_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    yaml = zt::testing::small_run_yaml(dir).string();
    run = dir / "run";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir);
  }
  ShellResult train(const std::string& args = "", const std::string& prefix = "") const {
    return sh(prefix + zt::testing::zerotrain_binary() + " train " + yaml + " --threads 1 " + args);
  }
  fs::path dir, run;
  std::string yaml;
};

}  // namespace

TEST_F(OutputDir, ANewRunIntoADirectoryHoldingARunExits2TouchingNothing) {
  ASSERT_EQ(train().rc, 0);
  const std::string metrics = file_bytes(run / "metrics.jsonl"), latest = file_bytes(run / "checkpoints" / "latest");
  const ShellResult r = train("--max_steps 2");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "holds a previous run");
  EXPECT_HAS(r.out, "--resume");
  EXPECT_HAS(r.out, "--overwrite_output_dir");
  EXPECT_EQ(file_bytes(run / "metrics.jsonl"), metrics);
  EXPECT_EQ(file_bytes(run / "checkpoints" / "latest"), latest);
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "global_step3"));
}

TEST_F(OutputDir, OverwriteOutputDirReplacesThePreviousRun) {
  ASSERT_EQ(train().rc, 0);  // checkpoints at steps 3 and 6, 8 metrics lines
  const ShellResult r = train("--max_steps 2 --save_interval 0 --eval_interval 0 --overwrite_output_dir");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "global_step3"));
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "global_step6"));
  EXPECT_EQ(file_bytes(run / "checkpoints" / "latest"), "global_step2\n");
  const std::string metrics = file_bytes(run / "metrics.jsonl");
  // Steps 1 and 2, and the validation loss at the end: nothing of the old run's 8 lines.
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 3) << metrics;
}

TEST_F(OutputDir, ARunOnALockedDirectoryExits2NamingTheHoldersPid) {
  fs::create_directories(run);
  const zt::train::OutputDirLock held(run);  // this process plays the running job
  const ShellResult r = train();
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "in use by another zerotrain run (pid " + std::to_string(::getpid()));
  EXPECT_FALSE(fs::exists(run / "metrics.jsonl"));
  const ShellResult resumed = train("--resume auto");
  EXPECT_EQ(resumed.rc, 2) << resumed.out;
}

TEST_F(OutputDir, UnderMpirunARefusedDirectoryEndsEveryRank) {
  if (!zt::testing::have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  ASSERT_EQ(train().rc, 0);
  const ShellResult r =
      sh(zt::testing::kMpirunEnv + "ZT_COLLECTIVE_TIMEOUT_S=60 OMP_NUM_THREADS=1 mpirun -np 2 " +
         zt::testing::zerotrain_binary() + " train " + yaml + " --per_device_train_batch_size 2 --threads 1");
  EXPECT_EQ(r.rc, 2) << "mpirun returns the ranks' bad-input exit code\n" << r.out;
  EXPECT_HAS(r.out, "holds a previous run");
  EXPECT_HAS(r.out, "rank 0 refused it");
  // And a resume under mpirun is accepted: rank 0 holds the lock, rank 1 does not need it.
  const ShellResult resumed =
      sh(zt::testing::kMpirunEnv + "ZT_COLLECTIVE_TIMEOUT_S=60 OMP_NUM_THREADS=1 mpirun -np 2 " +
         zt::testing::zerotrain_binary() + " train " + yaml +
         " --per_device_train_batch_size 2 --threads 1 --resume latest --max_steps 7");
  EXPECT_EQ(resumed.rc, 0) << resumed.out;
}

TEST_F(OutputDir, AFullDiskUnderMetricsIsOneWarningAndTheRunGoesOn) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  fs::create_directories(run);
  fs::create_symlink("/dev/full", run / "metrics.jsonl");
  // --resume auto: no checkpoint yet, so a fresh start that appends to the metrics file.
  const ShellResult r = train("--resume auto --max_steps 3");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "cannot write metrics file");
  EXPECT_HAS(r.out, "No space left on device");
  EXPECT_EQ(r.out.find("cannot write metrics file"), r.out.rfind("cannot write metrics file")) << "more than once";
  EXPECT_TRUE(fs::exists(run / "final"));
}

TEST_F(OutputDir, ACheckpointWriteErrorIsAnErrorNamingTheFile) {
  // A file size limit (SIGXFSZ ignored, so writes fail with EFBIG) lets the small prepared
  // files through and fails the first checkpoint shard: a disk filling up mid-save.
  const ShellResult r = train("", "trap '' XFSZ; ulimit -f 400; ");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "saving checkpoint");
  EXPECT_HAS(r.out, "shard_rank0.safetensors");
  EXPECT_HAS(r.out, "File too large");
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "latest")) << "latest names a checkpoint that failed";
}

// A drive (pretended) with too little room for final/ and a checkpoint: exit 2 before the
// first step, naming output_dir and the sizes, not a "No space left on device" hours later.
// Without checkpoints (save_strategy no) final/ alone is counted.
TEST_F(OutputDir, ADriveTooSmallForTheOutputsIsExit2BeforeTraining) {
  ShellResult r = train("--max_steps 3", "ZT_TEST_DRIVE_FREE_BYTES=4096 ");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "output_dir");
  EXPECT_HAS(r.out, "final/ needs");
  EXPECT_HAS(r.out, "and checkpoints of");
  EXPECT_EQ(r.out.find("step      1"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(run / "final"));

  r = train("--max_steps 3 --overwrite_output_dir --save_strategy no", "ZT_TEST_DRIVE_FREE_BYTES=4096 ");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "final/ needs");
  EXPECT_EQ(r.out.find("checkpoints of"), std::string::npos) << r.out;
}
