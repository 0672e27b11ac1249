// Bounded inputs through the CLI (issue 15): a directory or a device as a config, a global
// batch beyond the data and a thread count beyond the cores end with exit 2 or a capped,
// warned count — never an empty config, a read until memory runs out, a step that never
// ends, or a hang at exit. Each command runs under `timeout` so a regression fails fast.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/shell.h"
#include "common/temp_dir.h"

namespace fs = std::filesystem;
using zt::testing::sh;

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

const std::string kZ = "timeout 60 " + zt::testing::zerotrain_binary();

TEST(BoundedInputs, DirectoriesAndDevicesAreNotConfigs) {
  const fs::path dir = zt::testing::fresh_test_dir("bounded_", "dirs");
  for (const std::string& flags : {std::string(" "), std::string(" --deepspeed "), std::string(" --config_file ")}) {
    const zt::testing::ShellResult r = sh(kZ + " train" + flags + dir.string() + " --max_steps 1");
    EXPECT_EQ(r.rc, 2) << flags << r.out;
    EXPECT_HAS(r.out, dir.string() + ": is a directory");
  }
  const zt::testing::ShellResult z = sh(kZ + " config check /dev/zero");
  EXPECT_EQ(z.rc, 2) << z.out;
  EXPECT_HAS(z.out, "/dev/zero: not a regular file");
  fs::remove_all(dir);
}

TEST(BoundedInputs, HugeAccumulationAndThreadCountsAreCheckedAgainstDataAndCores) {
  const fs::path dir = zt::testing::fresh_test_dir("bounded_", "batch");
  const fs::path yaml = dir / "run.yaml";
  std::ofstream(yaml) << "model: {preset: tiny-gpt2}\ndata:\n  train: ['" << ZT_SOURCE_DIR
                      << "/data/text/artistic.txt']\n  seq_len: 32\nper_device_train_batch_size: 4\n"
                         "max_steps: 1\nsamples: {tokens: 0}\noutput_dir: '"
                      << (dir / "run").string() << "'\n";
  const zt::testing::ShellResult r =
      sh(kZ + " train " + yaml.string() + " --threads 100000 --gradient_accumulation_steps 100000");
  EXPECT_EQ(r.rc, 2) << r.out;  // 124 would be the timeout: a hang
  EXPECT_HAS(r.out, "--threads 100000 is more than this machine's");
  EXPECT_HAS(r.out, "gradient_accumulation_steps 100000");
  EXPECT_HAS(r.out, "windows of 32 tokens per epoch");
  fs::remove_all(dir);
}

TEST(BoundedInputs, ThreadCountsBelowOneOrOutOfRangeAreErrors) {
  for (const std::string& cmd :
       {std::string("train"), std::string("generate --model x --prompt y"), std::string("eval --model x --data y"),
        std::string("prepare --tokenizer x --out y z")}) {
    const zt::testing::ShellResult zero = sh(kZ + " " + cmd + " --threads 0");
    EXPECT_EQ(zero.rc, 2) << cmd << ": " << zero.out;
    EXPECT_HAS(zero.out, "--threads 0: give at least 1");
  }
  const zt::testing::ShellResult big = sh(kZ + " generate --model x --prompt y --threads 99999999999999999999");
  EXPECT_EQ(big.rc, 2) << big.out;
  EXPECT_HAS(big.out, "--threads 99999999999999999999 is out of range");
}

}  // namespace
