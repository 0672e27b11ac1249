// zerotrain tokenizer train/encode/decode from the shell: a trained tokenizer round-trips
// text, and bad input exits 2 with a message naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "io/tokenizer.h"
#include "common/shell.h"

namespace {

using Result = zt::testing::ShellResult;
using zt::testing::sh;

TEST(TokenizerCli, TrainEncodeDecodeRoundTrip) {
  const std::string bin = std::string(ZT_BINARY_DIR) + "/zerotrain";
  ASSERT_EQ(::access(bin.c_str(), X_OK), 0) << "build the zerotrain target first";
  char tmpl[] = "/tmp/zt_tokenizer_cli_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string json = dir + "/tokenizer.json";
  const Result train =
      sh(bin + " tokenizer train --vocab-size 400 --out " + json + " " + ZT_SOURCE_DIR + "/data/text/gpl-3.txt");
  ASSERT_EQ(train.rc, 0) << train.out;
  EXPECT_EQ(zt::io::load_tokenizer(json)->vocab_size(), 400);

  const std::string text = "Permission is hereby granted, free of charge; 日本 🎉";
  const Result enc = sh(bin + " tokenizer encode --tokenizer " + json + " --text '" + text + "'");
  ASSERT_EQ(enc.rc, 0) << enc.out;
  const std::string ids = enc.out.substr(0, enc.out.find('\n'));
  EXPECT_LT(std::count(ids.begin(), ids.end(), ' ') + 1, static_cast<long>(text.size()));
  const Result dec = sh(bin + " tokenizer decode --tokenizer " + json + " --ids '" + ids + "'");
  ASSERT_EQ(dec.rc, 0) << dec.out;
  EXPECT_EQ(dec.out, text + "\n");

  std::ofstream(dir + "/broken.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "q"]]}})";
  const Result bad = sh(bin + " tokenizer encode --tokenizer " + dir + "/broken.json --text hi");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.out.find("broken.json"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("'q'"), std::string::npos) << bad.out;
  EXPECT_EQ(sh(bin + " tokenizer encode --text hi").rc, 2);
  sh("rm -rf '" + dir + "'");
}

}  // namespace
