// The subcommands' option parser (src/cli/args.cpp) through the binary: HF's underscore
// spelling of an option is ours with dashes, and an unknown option still gets its hint.
#include <gtest/gtest.h>

#include <string>

#include "common/shell.h"

namespace {

TEST(CliArgs, UnderscoreSpellingIsTheDashedOption) {
  // max_new_tokens 0 is refused by the option's own check: the option was recognised.
  const auto r =
      zt::testing::sh(zt::testing::zerotrain_binary() + " generate --model /nonexistent --max_new_tokens 0 --prompt x");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--max-new-tokens must be positive"), std::string::npos) << r.out;
  const auto eq =
      zt::testing::sh(zt::testing::zerotrain_binary() + " generate --model /nonexistent --max_new_tokens=0 --prompt x");
  EXPECT_NE(eq.out.find("--max-new-tokens must be positive"), std::string::npos) << eq.out;
}

TEST(CliArgs, UnknownOptionStillNamesTheClosest) {
  const auto r = zt::testing::sh(zt::testing::zerotrain_binary() + " generate --max_new_tokenz 3");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("unknown option '--max_new_tokenz'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did you mean --max-new-tokens?"), std::string::npos) << r.out;
}

}  // namespace
