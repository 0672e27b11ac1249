// Who owns an output_dir, through the real `zerotrain train`: a new run into a directory
// holding a run exits 2 and changes nothing; --overwrite_output_dir replaces the old run;
// a run on a directory another run holds exits 2 naming its pid; under mpirun a refused
// directory ends every rank (no rank left waiting); a full disk under metrics.jsonl is a
// warning and the run goes on; a drive too small for final/ and a checkpoint is exit 2 before
// the first step; links planted at output names are refused; an unwritable output part is
// exit 2 at start-up and its retry runs.
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
  // metrics.jsonl already at the file size limit (SIGXFSZ ignored, so its appends fail with
  // EFBIG as on a full disk) while the checkpoints and final/, each smaller, still fit.
  // (A link to /dev/full is no longer followed: see ALinkPlantedAtAnOutputNameIsRefused.)
  // The shell fills the file up to its limit (16 MiB, or 32 MiB where ulimit counts KiB),
  // above one checkpoint of this model (~11 MB), with whole 8-byte records (a torn last
  // record would be cut off before the run appends, making room).
  fs::create_directories(run);
  const std::string fill =
      "yes '{\"a\":1}' | head -c 67108864 > " + (run / "metrics.jsonl").string() + " 2>/dev/null; ";
  // --resume auto: no checkpoint yet, so a fresh start that appends to the metrics file.
  const ShellResult r = train("--resume auto --max_steps 3", "trap '' XFSZ; ulimit -f 32768; " + fill);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "cannot write metrics file");
  EXPECT_HAS(r.out, "File too large");
  EXPECT_EQ(r.out.find("cannot write metrics file"), r.out.rfind("cannot write metrics file")) << "more than once";
  EXPECT_TRUE(fs::exists(run / "final"));
}

// A symbolic link planted at the name of the lock file or of metrics.jsonl is never
// followed: exit 2 naming the link, and the file it points to keeps its bytes.
TEST_F(OutputDir, ALinkPlantedAtAnOutputNameIsRefused) {
  std::ofstream(dir / "victim.txt") << "precious";
  for (const char* name : {".zerotrain.lock", "metrics.jsonl"}) {
    SCOPED_TRACE(name);
    fs::remove_all(run);
    fs::create_directories(run);
    fs::create_symlink(dir / "victim.txt", run / name);
    const ShellResult r = train("--resume auto --max_steps 1");
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_HAS(r.out, (run / name).string());
    EXPECT_HAS(r.out, "symbolic link");
    EXPECT_EQ(file_bytes(dir / "victim.txt"), "precious");
  }
}

// An output part that cannot be written (checkpoints/ a regular file, which stops root as
// well as anyone; logging_dir under a file) is exit 2 at start-up, before the first step,
// naming it; the refused run leaves nothing that blocks its retry, which runs once the
// cause is fixed (same command, no --resume, no --overwrite_output_dir).
TEST_F(OutputDir, AnUnwritableOutputIsExit2AtStartUpAndTheRetryRuns) {
  fs::create_directories(run);
  std::ofstream(run / "checkpoints") << "not a folder";
  ShellResult r = train("--max_steps 2");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, (run / "checkpoints").string());
  EXPECT_HAS(r.out, "is not a directory");
  EXPECT_EQ(r.out.find("step      1"), std::string::npos) << r.out;
  fs::remove(run / "checkpoints");
  r = train("--max_steps 2");
  EXPECT_EQ(r.rc, 0) << r.out;

  fs::remove_all(run);
  std::ofstream(dir / "afile") << "x";
  const std::string tb = "--report_to tensorboard --logging_dir " + (dir / "afile" / "tb").string();
  r = train("--max_steps 2 " + tb);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "logging_dir");
  EXPECT_HAS(r.out, (dir / "afile").string());
  EXPECT_EQ(r.out.find("step      1"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(run / "metrics.jsonl"));
  r = train("--max_steps 2 --report_to tensorboard --logging_dir " + (dir / "tb").string());
  EXPECT_EQ(r.rc, 0) << r.out;
}

// A start-up error after metrics.jsonl was opened (its first record comes with step 1)
// leaves it empty, which is not a previous run: the retry is not refused.
TEST_F(OutputDir, AnEmptyMetricsFileDoesNotBlockTheRetry) {
  fs::create_directories(run);
  std::ofstream(run / "metrics.jsonl");
  const ShellResult r = train("--max_steps 1");
  EXPECT_EQ(r.rc, 0) << r.out;
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
