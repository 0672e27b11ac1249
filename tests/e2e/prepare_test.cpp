// `zerotrain prepare` from the shell: GPT-2 tokens match PyPI tokenizers (EOS 50256 before
// each document), the summary is printed, and bad input exits 2 naming the file with no
// output directory left behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/shell.h"
#include "common/temp_dir.h"
#include "io/token_dataset.h"

namespace fs = std::filesystem;

namespace {

using Result = zt::testing::ShellResult;
using zt::testing::sh;

// This file's per-test scratch directory: build/test_tmp/prepare_e2e_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("prepare_e2e_")) {}
};

}  // namespace

TEST(PrepareCli, Gpt2TokensMatchPypiTokenizers) {
  const std::string bin = std::string(ZT_BINARY_DIR) + "/zerotrain";
  ASSERT_EQ(::access(bin.c_str(), X_OK), 0) << "build the zerotrain target first";
  TempDir dir;
  const std::vector<std::string> docs = {"Hello world! It's a test.", "  leading spaces\nand lines\n",
                                         "Unicode: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89",
                                         "numbers 12345 and   gaps"};
  {
    std::ofstream out(dir.file("docs.jsonl"));
    for (const auto& d : docs) out << nlohmann::json{{"text", d}}.dump() << "\n";
  }
  const std::string gpt2 = std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2";
  const std::string out = dir.file("out");
  const Result r =
      sh(bin + " prepare --tokenizer " + gpt2 + " --out " + out + " --shard-size 16 " + dir.file("docs.jsonl"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("prepared 4 documents"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MB/s"), std::string::npos) << r.out;
  std::vector<int32_t> ours;
  for (const auto& p : zt::io::list_token_shards(out + "/train_*.bin")) {
    auto s = zt::io::open_token_shard(p);
    EXPECT_EQ(s->vocab_size(), 50257);
    EXPECT_EQ(s->eos_id(), 50256);
    for (int64_t i = 0; i < s->size(); ++i) ours.push_back(s->at(i));
  }
  // The oracle: PyPI tokenizers with the same vocab.json + merges.txt.
  const std::string script = dir.file("oracle.py");
  std::ofstream(script) << "import json, sys\n"
                           "from tokenizers import ByteLevelBPETokenizer\n"
                           "tok = ByteLevelBPETokenizer(sys.argv[1] + '/vocab.json', sys.argv[1] + '/merges.txt')\n"
                           "ids = []\n"
                           "for line in open(sys.argv[2], encoding='utf-8'):\n"
                           "    ids += [50256] + tok.encode(json.loads(line)['text']).ids\n"
                           "print(' '.join(map(str, ids)))\n";
  const Result py = sh(std::string("'") + ZT_PYTHON3 + "' " + script + " " + gpt2 + " " + dir.file("docs.jsonl"));
  ASSERT_EQ(py.rc, 0) << py.out << "(needs the .venv with PyPI tokenizers: scripts/install_deps.sh)";
  std::vector<int32_t> theirs;
  for (size_t pos = 0; pos < py.out.size();) {
    size_t end = py.out.find_first_of(" \n", pos);
    if (end == std::string::npos) end = py.out.size();
    if (end > pos) theirs.push_back(std::stoi(py.out.substr(pos, end - pos)));
    pos = end + 1;
  }
  EXPECT_EQ(ours, theirs);
}

TEST(PrepareCli, BadInputExits2WithNoOutput) {
  const std::string bin = std::string(ZT_BINARY_DIR) + "/zerotrain";
  ASSERT_EQ(::access(bin.c_str(), X_OK), 0) << "build the zerotrain target first";
  TempDir dir;
  std::ofstream(dir.file("bad.jsonl")) << "{\"text\": \"ok\"}\n{\"txt\": \"oops\"}\n";
  const std::string out = dir.file("out");
  Result r = sh(bin + " prepare --tokenizer bytes --eos 0 --out " + out + " " + dir.file("bad.jsonl"));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("bad.jsonl:2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--field"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  r = sh(bin + " prepare --tokenizer " + dir.file("missing.json") + " --out " + out + " " + dir.file("bad.jsonl"));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("missing.json"), std::string::npos) << r.out;
  r = sh(bin + " prepare --tokenizer bytes --out " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  r = sh(bin + " prepare --tokenizer bytes --eos 0 --out " + out + " --shard-size x " + dir.file("bad.jsonl"));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_FALSE(fs::exists(out));
}
