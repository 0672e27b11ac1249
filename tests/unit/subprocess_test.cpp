// core/subprocess.h: programs run from an argument vector (no shell reads the arguments),
// with their output captured through a pipe up to a cap, and a missing program reported.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/temp_dir.h"
#include "core/subprocess.h"

namespace zt {
namespace {

TEST(Subprocess, ArgumentsReachTheProgramAsTheyAreWithNoShell) {
  zt::testing::TempDir dir(zt::testing::build_temp_path("subprocess_"));
  const std::string marker = dir.file("pwned");
  // Each of these would run `touch` if a shell read the line.
  const std::string nasty = "x';touch " + marker + ";'$(touch " + marker + ")`touch " + marker + "`";
  const ProgramResult r = run_program({"printf", "%s|%s", nasty, "two words"});
  ASSERT_TRUE(r.ok()) << r.describe() << r.output;
  EXPECT_EQ(r.output, nasty + "|two words");
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Subprocess, ExitCodesStderrAndTheOutputCap) {
  const ProgramResult fail = run_program({"sh", "-c", "echo oops >&2; exit 3"});
  EXPECT_EQ(fail.ended, ProgramResult::Ended::Exited);
  EXPECT_EQ(fail.code, 3);
  EXPECT_EQ(fail.output, "oops\n");
  EXPECT_EQ(fail.describe(), "exit code 3");
  // 1 MB of output through a 1000-byte cap: read to the end (the child is not left
  // blocked on a full pipe), the first 1000 bytes kept.
  const ProgramResult big = run_program({"head", "-c", "1000000", "/dev/zero"}, 1000);
  EXPECT_TRUE(big.ok()) << big.describe();
  EXPECT_EQ(big.output.size(), 1000u);
  EXPECT_TRUE(big.truncated);
  const ProgramResult killed = run_program({"sh", "-c", "kill -9 $$"});
  EXPECT_EQ(killed.ended, ProgramResult::Ended::Signalled);
  EXPECT_EQ(killed.code, 9);
}

TEST(Subprocess, AMissingProgramIsReportedNotThrown) {
  const ProgramResult r = run_program({"zerotrain-no-such-program-xyz"});
  EXPECT_EQ(r.ended, ProgramResult::Ended::NotStarted);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.describe().find("could not start"), std::string::npos) << r.describe();
  EXPECT_EQ(find_program("zerotrain-no-such-program-xyz"), "");
  const std::string sh = find_program("sh");
  EXPECT_FALSE(sh.empty());
  EXPECT_EQ(find_program(sh), sh);
}

}  // namespace
}  // namespace zt
