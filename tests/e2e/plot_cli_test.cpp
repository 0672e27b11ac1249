// `zerotrain plot`: a trained run's output directory becomes metrics.svg (exit 0); a folder
// without metrics.jsonl is exit 2 naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/small_run.h"
#include "common/temp_dir.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace {

int zerotrain(const std::string& args, std::string* out) {
  const std::string cmd = std::string(ZT_BINARY_DIR) + "/zerotrain " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(PlotCli, ARunsOutputDirectoryBecomesAnSvg) {
  const fs::path a = zt::testing::fresh_test_dir("plot_cli_", "run");
  zt::train::run_training(zt::testing::small_run(a, {"--max_steps", "4", "--save_strategy", "no"}));
  std::string out;
  ASSERT_EQ(zerotrain("plot " + (a / "run").string(), &out), 0) << out;
  const fs::path svg = a / "run" / "metrics.svg";
  ASSERT_TRUE(fs::exists(svg)) << out;
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("<polyline"), std::string::npos);
  std::string err;
  EXPECT_EQ(zerotrain("plot " + a.string(), &err), 2) << err;  // no metrics.jsonl there
  EXPECT_NE(err.find("metrics.jsonl"), std::string::npos) << err;
  fs::remove_all(a);
}

}  // namespace
