// io::remove_stale_atomic_temps: write_file_atomic's temporaries (<name>.tmp.<pid>.<n>) of
// dead processes go, a live process's and other files stay (a crash stress run found a
// killed run's tokenizer.json.tmp.* left in its output_dir for good).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "io/staging_dir.h"

namespace fs = std::filesystem;

namespace {

TEST(StagingDir, StaleAtomicTemporariesOfDeadProcessesAreRemoved) {
  zt::testing::TempDir tmp(zt::testing::build_temp_path("staging_dir_"));
  const std::string dir = tmp.file("out");
  fs::create_directories(dir);
  const std::string live_pid = std::to_string(::getpid());
  const std::vector<std::string> dead = {"tokenizer.json.tmp.999999999.0", "train_000000.bin.tmp.999999998.12"};
  const std::vector<std::string> kept = {"tokenizer.json", "latest.tmp." + live_pid + ".3", "notes.tmp.x.0",
                                         "a.tmp.999999999.", "b.tmp.999999999.1x"};
  for (const auto& n : dead) std::ofstream(dir + "/" + n) << "partial";
  for (const auto& n : kept) std::ofstream(dir + "/" + n) << "keep";
  fs::create_directories(dir + "/model.tmp.999999999.0");  // a directory: not write_file_atomic's

  std::vector<std::string> removed = zt::io::remove_stale_atomic_temps(dir);
  std::sort(removed.begin(), removed.end());
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(fs::path(removed[0]).filename(), "tokenizer.json.tmp.999999999.0");
  EXPECT_EQ(fs::path(removed[1]).filename(), "train_000000.bin.tmp.999999998.12");
  for (const auto& n : dead) EXPECT_FALSE(fs::exists(dir + "/" + n)) << n;
  for (const auto& n : kept) EXPECT_TRUE(fs::exists(dir + "/" + n)) << n;
  EXPECT_TRUE(fs::exists(dir + "/model.tmp.999999999.0"));
  EXPECT_TRUE(zt::io::remove_stale_atomic_temps(tmp.file("missing")).empty());
}

}  // namespace
