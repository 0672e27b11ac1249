// Bounded inputs through the CLI (issue 15): a directory or a device as a config, a global
// batch beyond the data and a thread count beyond the cores end with exit 2 or a capped,
// warned count — never an empty config, a read until memory runs out, a step that never
// ends, or a hang at exit. Each command runs under `timeout` so a regression fails fast.
#include <gtest/gtest.h>
#include <sys/stat.h>

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
  EXPECT_HAS(z.out, "/dev/zero: not a regular file (it is a character device)");
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

// Data, metrics and `latest` given as a FIFO (whose open() would wait for a writer forever)
// or as /dev/zero (which never ends): exit 2 naming the path and what it is, at once.
// `timeout 20`: a regression fails with 124 instead of hanging the suite.
const std::string kZ20 = "timeout 20 " + zt::testing::zerotrain_binary();

TEST(BoundedInputs, FifosAndDevicesAsDataAndMetricsAreRefusedWithoutBlocking) {
  const fs::path dir = zt::testing::fresh_test_dir("bounded_", "fifo");
  const std::string fifo = (dir / "data.jsonl").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string args, path, kind;
  };
  for (const Case& c :
       {Case{"eval --model " + dir.string() + " --data " + fifo, fifo, "a FIFO"},
        Case{"eval --model " + dir.string() + " --data /dev/zero", "/dev/zero", "a character device"},
        Case{"prepare --tokenizer bytes --no-eos --out " + (dir / "p1").string() + " " + fifo, fifo, "a FIFO"},
        Case{"prepare --tokenizer bytes --no-eos --out " + (dir / "p2").string() + " /dev/zero", "/dev/zero",
             "a character device"},
        Case{"plot " + fifo, fifo, "a FIFO"}, Case{"plot /dev/zero", "/dev/zero", "a character device"}}) {
    const zt::testing::ShellResult r = sh(kZ20 + " " + c.args);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.out;  // 124: it hung; 1 or 137: it read until memory ran out
    EXPECT_HAS(r.out, c.path + ": not a regular file (it is " + c.kind + ")");
  }
  EXPECT_FALSE(fs::exists(dir / "p1")) << "nothing is written for a refused input";
  fs::remove_all(dir);
}

TEST(BoundedInputs, ALatestThatIsAFifoOrDevIsAProblemNotAHang) {
  const fs::path dir = zt::testing::fresh_test_dir("bounded_", "latest");
  const fs::path yaml = dir / "run.yaml";
  std::ofstream(yaml) << "model: {preset: tiny-gpt2}\ndata:\n  train: ['" << ZT_SOURCE_DIR
                      << "/data/text/artistic.txt']\n  seq_len: 32\nper_device_train_batch_size: 4\n"
                         "max_steps: 2\nsamples: {tokens: 0}\noutput_dir: '"
                      << (dir / "run").string() << "'\n";
  const fs::path latest = dir / "run" / "checkpoints" / "latest";
  fs::create_directories(latest.parent_path());
  ASSERT_EQ(::mkfifo(latest.c_str(), 0600), 0);
  const zt::testing::ShellResult fifo = sh(kZ20 + " train " + yaml.string() + " --threads 1 --resume latest");
  EXPECT_EQ(fifo.rc, 2) << fifo.out;
  EXPECT_HAS(fifo.out, latest.string() + ": not a regular file (it is a FIFO)");
  fs::remove(latest);
  fs::create_symlink("/dev/zero", latest);
  const zt::testing::ShellResult zero = sh(kZ20 + " train " + yaml.string() + " --threads 1 --resume latest");
  EXPECT_EQ(zero.rc, 2) << zero.out;
  EXPECT_HAS(zero.out, latest.string() + ": not a regular file (it is a symbolic link to a character device)");
  // --resume auto too: its saves replace `latest`, which zerotrain never does through a
  // link, so the run is refused at start-up (not after its training, at the first save),
  // and the link is left as it is.
  const zt::testing::ShellResult automatic = sh(kZ20 + " train " + yaml.string() + " --threads 1 --resume auto");
  EXPECT_EQ(automatic.rc, 2) << automatic.out;
  EXPECT_HAS(automatic.out, "it is a symbolic link to a character device");
  EXPECT_EQ(automatic.out.find("step      1"), std::string::npos) << "nothing was trained";
  EXPECT_TRUE(fs::is_symlink(latest));
  // The `latest` reader alone (zerotrain consolidate, which writes nothing there) names
  // what the link leads to.
  const zt::testing::ShellResult read = sh(kZ20 + " consolidate " + latest.parent_path().string() + " " +
                                           (dir / "hf").string());
  EXPECT_EQ(read.rc, 2) << read.out;
  EXPECT_HAS(read.out, "it is a character device");
  fs::remove_all(dir);
}

}  // namespace
