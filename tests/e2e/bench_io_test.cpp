// `zerotrain bench io` from the shell: a small sweep prints one row per block size x queue
// depth x threads with positive GB/s, the dd baseline, the best settings as an aio section,
// and the same rows as JSON; the test file is gone afterwards; a missing or absent --path
// and a bad block size exit 2 naming the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/shell.h"
#include "common/temp_dir.h"

namespace fs = std::filesystem;

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::string zerotrain() { return zt::testing::zerotrain_binary(); }

}  // namespace

TEST(BenchIo, SweepsTheSettingsAndSuggestsAnAioSection) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("bench_io_"));
  const std::string json = dir.file("io.json");
  const auto r = zt::testing::sh(zerotrain() + " bench io --path " + dir.path().string() +
                                 " --size 4M --block-sizes 64K,1M --queue-depths 2,8 --threads 1 --json " + json);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "\"aio\": {\"block_size\": ");
  EXPECT_HAS(r.out, "best read ");
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["rows"].size(), 4u) << r.out;
  for (const auto& row : doc["rows"]) {
    EXPECT_GT(row["write_gbs"].get<double>(), 0.0);
    EXPECT_GT(row["read_gbs"].get<double>(), 0.0);
  }
  if (doc["dd_write_gbs"].get<double>() > 0) {
    EXPECT_HAS(r.out, "# dd bs=1M oflag=direct: write ");
    EXPECT_HAS(r.out, "; two dd at once: read ");
    EXPECT_GT(doc["mixed"]["dd_read_gbs"].get<double>(), 0.0);
  }
  // The chosen settings reading and writing at once (pipelined swapping's traffic).
  EXPECT_HAS(r.out, "read and write at once (block ");
  EXPECT_GT(doc["mixed"]["read_gbs"].get<double>(), 0.0);
  EXPECT_GT(doc["mixed"]["write_gbs"].get<double>(), 0.0);
  // Only the JSON is left: the test file went.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.path().filename() != "io.json";
  EXPECT_EQ(files, 0u) << r.out;

  const auto threads = zt::testing::sh(zerotrain() + " bench io --path " + dir.path().string() +
                                       " --size 1M --block-sizes 256K --queue-depths 4 --threads 2 --engine threads"
                                       " --no-dd");
  ASSERT_EQ(threads.rc, 0) << threads.out;
  EXPECT_HAS(threads.out, "threads ");
}

TEST(BenchIo, BadArgumentsExitTwoNamingTheFlag) {
  auto r = zt::testing::sh(zerotrain() + " bench io");
  EXPECT_EQ(r.rc, 2);
  EXPECT_HAS(r.out, "--path");
  r = zt::testing::sh(zerotrain() + " bench io --path /nonexistent-zt-drive");
  EXPECT_EQ(r.rc, 2);
  EXPECT_HAS(r.out, "/nonexistent-zt-drive");
  r = zt::testing::sh(zerotrain() + " bench io --path /tmp --block-sizes 1000");
  EXPECT_EQ(r.rc, 2);
  EXPECT_HAS(r.out, "--block-sizes");
}
