// `zerotrain plot`: a trained run's output directory becomes metrics.svg (exit 0); a folder
// without metrics.jsonl is exit 2 naming it; the PNG step runs rsvg-convert with the paths
// as arguments, never through a shell (a folder name with quotes and `;` runs nothing).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/shell.h"
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

// A word for sh: single-quoted, its own quotes spelled '\''.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

TEST(PlotCli, APngIsMadeWithoutAShellWhateverTheFolderIsNamed) {
  const fs::path a = zt::testing::fresh_test_dir("plot_cli_", "png");
  const fs::path run = a / "run';touch pwned;'x";
  fs::create_directories(run);
  {
    std::ofstream m(run / "metrics.jsonl");
    for (int s = 1; s <= 3; ++s) m << R"({"step": )" << s << R"(, "loss": )" << 5 - s << "}\n";
  }
  // A stand-in rsvg-convert first in PATH: copies the SVG to the PNG path it is given.
  const fs::path bin = a / "bin";
  fs::create_directories(bin);
  {
    std::ofstream script(bin / "rsvg-convert");
    script << "#!/bin/sh\n[ \"$1\" = -o ] && cp \"$3\" \"$2\"\n";
  }
  fs::permissions(bin / "rsvg-convert", fs::perms::owner_all);
  const zt::testing::ShellResult r =
      zt::testing::sh("cd " + quoted(a.string()) + " && PATH=" + quoted(bin.string()) + ":\"$PATH\" timeout 60 " +
                      zt::testing::zerotrain_binary() + " plot " + quoted(run.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(run / "metrics.svg")) << r.out;
  EXPECT_TRUE(fs::exists(run / "metrics.png")) << r.out;
  EXPECT_NE(r.out.find("metrics.png"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(a / "pwned")) << "a shell ran the folder name's command";
  EXPECT_FALSE(fs::exists(run / "pwned"));
  EXPECT_FALSE(fs::exists("pwned"));
  fs::remove_all(a);
}

}  // namespace
