// OutputDirLock and claim_output_dir: one run per output_dir (the second is refused naming
// the first's pid, and may lock once the first is gone); a fresh run into a directory that
// holds a run is refused without touching it; overwrite removes the previous run's files;
// resume keeps them.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "core/error.h"
#include "train/output_dir_lock.h"

namespace fs = std::filesystem;
using zt::train::claim_output_dir;
using zt::train::OutputDirLock;
using zt::train::OutputDirUse;

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), zt::ErrorKind::BadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// A directory holding a finished run's files.
void make_previous_run(const fs::path& dir) {
  fs::create_directories(dir / "checkpoints" / "global_step2");
  std::ofstream(dir / "checkpoints" / "latest") << "global_step2\n";
  fs::create_directories(dir / "final");
  std::ofstream(dir / "metrics.jsonl") << "{\"step\":1}\n{\"step\":2}\n";
}

}  // namespace

TEST(OutputDirLock, ASecondLockIsRefusedNamingTheHoldersPidAndFreedWithTheFirst) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("lock_"));
  {
    OutputDirLock first(dir.path());
    std::ifstream in(first.path());
    std::string pid;
    in >> pid;
    EXPECT_EQ(pid, std::to_string(::getpid()));
    // flock excludes per open file description, so a second lock in this process conflicts
    // as one in another process would.
    const std::string m = message_of([&] { OutputDirLock second(dir.path()); });
    EXPECT_NE(m.find("in use by another zerotrain run (pid " + std::to_string(::getpid())), std::string::npos) << m;
    const std::string c = message_of([&] { claim_output_dir(dir.path(), OutputDirUse::Resume); });
    EXPECT_NE(c.find("in use"), std::string::npos) << c;
  }
  EXPECT_NO_THROW(OutputDirLock again(dir.path()));
}

TEST(OutputDirLock, AFreshRunIntoADirectoryHoldingARunIsRefusedTouchingNothing) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("lock_"));
  make_previous_run(dir.path());
  const std::string m = message_of([&] { claim_output_dir(dir.path(), OutputDirUse::Fresh); });
  EXPECT_NE(m.find("holds a previous run (checkpoints/, final/, metrics.jsonl)"), std::string::npos) << m;
  EXPECT_NE(m.find("--resume latest"), std::string::npos) << m;
  EXPECT_NE(m.find("--overwrite_output_dir"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir.path() / ".zerotrain.lock")) << "a refused run created its lock file";
  EXPECT_EQ(zt::train::previous_run_files(dir.path()).size(), 3u);
}

TEST(OutputDirLock, ResumeKeepsAndOverwriteRemovesThePreviousRun) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("lock_"));
  make_previous_run(dir.path());
  std::ofstream(dir.path() / "tokenizer.json") << "{}";  // prepared files are not a run
  claim_output_dir(dir.path(), OutputDirUse::Resume).reset();
  EXPECT_EQ(zt::train::previous_run_files(dir.path()).size(), 3u);
  const auto lock = claim_output_dir(dir.path(), OutputDirUse::Overwrite);
  EXPECT_TRUE(zt::train::previous_run_files(dir.path()).empty());
  EXPECT_TRUE(fs::exists(dir.path() / "tokenizer.json"));
}

TEST(OutputDirLock, AMissingDirectoryIsCreatedAndAFileIsRefused) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("lock_"));
  EXPECT_NO_THROW(claim_output_dir(dir.path() / "a" / "b", OutputDirUse::Fresh));
  EXPECT_TRUE(fs::is_directory(dir.path() / "a" / "b"));
  std::ofstream(dir.path() / "file") << "x";
  const std::string m = message_of([&] { claim_output_dir(dir.path() / "file", OutputDirUse::Fresh); });
  EXPECT_NE(m.find("is not a directory"), std::string::npos) << m;
}

// The lock file is opened without following links: one planted at .zerotrain.lock (to
// someone's file) is refused with exit 2 naming it, and the file it names keeps its bytes
// (it used to be truncated to 0 bytes); a FIFO there is refused without blocking.
TEST(OutputDirLock, ALinkOrFifoAtTheLockNameIsRefusedAndItsTargetUntouched) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("lock_"));
  const fs::path out = dir.path() / "out";
  fs::create_directories(out);
  std::ofstream(dir.path() / "victim.txt") << "precious";
  fs::create_symlink(dir.path() / "victim.txt", out / ".zerotrain.lock");
  std::string m = message_of([&] { claim_output_dir(out, OutputDirUse::Fresh); });
  EXPECT_NE(m.find((out / ".zerotrain.lock").string()), std::string::npos) << m;
  EXPECT_NE(m.find("symbolic link"), std::string::npos) << m;
  std::ifstream in(dir.path() / "victim.txt");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "precious");
  fs::remove(out / ".zerotrain.lock");
  ASSERT_EQ(::mkfifo((out / ".zerotrain.lock").c_str(), 0644), 0);
  m = message_of([&] { OutputDirLock lock(out); });
  EXPECT_NE(m.find("FIFO"), std::string::npos) << m;
}

// A metrics.jsonl left empty (a run that failed at start-up, before its first step) and an
// empty checkpoints/ are not a previous run: the failed run's retry is not refused.
TEST(OutputDirLock, WhatARunThatFailedAtStartUpLeavesIsNotAPreviousRun) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("lock_"));
  fs::create_directories(dir.path() / "checkpoints");
  std::ofstream(dir.path() / "metrics.jsonl");
  EXPECT_TRUE(zt::train::previous_run_files(dir.path()).empty());
  EXPECT_NO_THROW(claim_output_dir(dir.path(), OutputDirUse::Fresh));
  std::ofstream(dir.path() / "metrics.jsonl") << "{\"step\":1}\n";
  EXPECT_EQ(zt::train::previous_run_files(dir.path()), std::vector<std::string>{"metrics.jsonl"});
}
