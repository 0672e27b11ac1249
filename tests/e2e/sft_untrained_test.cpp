// A fine-tune that would train nothing (docs/formats.md "Samples that train nothing"): SFT
// samples padded into windows of seq_len + 1 tokens, cut at the end, keep no target when the
// prompt fills the window. When no sample keeps one, `zerotrain train` exits 2 at start-up
// with the fix (it used to print `loss 0.0000 | grad norm 0.0000` at every step and write
// an untrained model, exit 0), naming records by file:line (JSONL it prepares) or by shard
// and sample (given shards); some without one are a warning naming them, and every step
// line of SFT data says how many tokens it trained on. Packed windows keep every response
// token.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/shell.h"
#include "common/temp_dir.h"

namespace fs = std::filesystem;
using zt::testing::sh;
using zt::testing::ShellResult;
using zt::testing::zerotrain_binary;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("sft_untrained_")) {}
};

// ~240 characters of pseudo-random words, different per record: far more than 9 tokens even
// for a tokenizer trained on these records (repeated text would merge into a few tokens).
std::string long_prompt(int seed) {
  uint32_t x = 2654435761u * static_cast<uint32_t>(seed + 1);
  std::string s = "Summarise:";
  while (s.size() < 240) {
    x = x * 1664525u + 1013904223u;
    s += (x >> 28) < 3 ? ' ' : static_cast<char>('a' + (x >> 24) % 26);
  }
  return s;
}

// prompt/response records, one per line: `short_prompts` short ones, then `long_prompts` long ones.
fs::path write_records(const fs::path& dir, int short_prompts, int long_prompts) {
  const fs::path p = dir / "sft.jsonl";
  std::ofstream out(p);
  for (int i = 0; i < short_prompts + long_prompts; ++i) {
    const std::string prompt = i < short_prompts ? "Say hi." : long_prompt(i);
    out << nlohmann::json{{"prompt", prompt}, {"response", " Hello there, friend."}}.dump() << "\n";
  }
  return p;
}

fs::path write_config(const fs::path& dir, const std::string& train, const std::string& model_extra = "",
                      const std::string& data_extra = "", int batch = 2, int steps = 2) {
  const fs::path yaml = dir / "run.yaml";
  std::ofstream(yaml) << "model: {preset: tiny-gpt2" << model_extra << "}\ndata:\n  train: ['" << train
                      << "']\n  seq_len: 8\n  validation_fraction: 0\n"
                      << data_extra << "per_device_train_batch_size: " << batch
                      << "\ngradient_accumulation_steps: 1\nlearning_rate: 1.0e-3\nmax_steps: " << steps
                      << "\nsave_strategy: 'no'\nsteps_per_print: 1\nseed: 3\noutput_dir: '" << (dir / "run").string()
                      << "'\n";
  return yaml;
}

ShellResult train(const fs::path& yaml) { return sh(zerotrain_binary() + " train " + yaml.string() + " --threads 1"); }

}  // namespace

TEST(SftUntrained, EveryPromptPastSeqLenIsExitTwoWithTheFix) {
  ASSERT_TRUE(fs::exists(zerotrain_binary()));
  TempDir tmp;
  const fs::path data = write_records(tmp.path(), 0, 4);
  ShellResult r = train(write_config(tmp.path(), data.string()));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("none of the 4 SFT samples has a target (a response token) within its first 9 tokens"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(data.string() + ":1"), std::string::npos) << r.out;  // names the records
  EXPECT_NE(r.out.find("a data.seq_len of at least"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data.packing: true"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step      1/2"), std::string::npos) << r.out;  // nothing trained
  EXPECT_FALSE(fs::exists(tmp.path() / "run" / "final"));

  // Packed windows keep the response tokens: the run trains.
  const fs::path packed = tmp.path() / "packed";
  fs::create_directories(packed);
  r = train(write_config(packed, data.string(), "", "  packing: true\n"));
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(SftUntrained, SomePromptsPastSeqLenAreAWarningAndStepsCountTheirTargets) {
  ASSERT_TRUE(fs::exists(zerotrain_binary()));
  TempDir tmp;
  const fs::path data = write_records(tmp.path(), 2, 2);
  const ShellResult r = train(write_config(tmp.path(), data.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("2 of 4 SFT samples have no target within their first 9 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(data.string() + ":3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(data.string() + ":4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" | targets "), std::string::npos) << r.out;
  std::ifstream metrics(tmp.path() / "run" / "metrics.jsonl");
  std::string line;
  int64_t targets = 0;
  while (std::getline(metrics, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("target_tokens")) targets += j["target_tokens"].get<int64_t>();
  }
  EXPECT_GT(targets, 0);

  // The same samples as shards given to a run: named by shard and sample.
  const fs::path tokenizer = tmp.path() / "run" / "tokenizer.json";
  const fs::path shards = tmp.path() / "run" / "data";
  ASSERT_TRUE(fs::exists(shards / "dataset.json"));
  const fs::path again = tmp.path() / "again";
  fs::create_directories(again);
  ShellResult s = train(write_config(again, shards.string(), ", tokenizer: '" + tokenizer.string() + "'"));
  EXPECT_EQ(s.rc, 0) << s.out;
  EXPECT_NE(s.out.find("train_000000.bin, sample 2"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("train_000000.bin, sample 3"), std::string::npos) << s.out;
  // Shards `zerotrain prepare` made of long prompts only: exit 2 at start-up.
  const fs::path long_only = write_records(again, 0, 3);
  const fs::path prepared = again / "long_shards";
  s = sh(zerotrain_binary() + " prepare --tokenizer " + tokenizer.string() + " --out " + prepared.string() + " " +
         long_only.string());
  ASSERT_EQ(s.rc, 0) << s.out;
  const fs::path third = tmp.path() / "third";
  fs::create_directories(third);
  s = train(write_config(third, prepared.string(), ", tokenizer: '" + tokenizer.string() + "'"));
  EXPECT_EQ(s.rc, 2) << s.out;
  EXPECT_NE(s.out.find("none of the 3 SFT samples"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("train_000000.bin, sample 0"), std::string::npos) << s.out;
}

// One sample per step, 3 of 4 without a target: each such step is a warning naming its
// sample (the first three), and its step line says it trained on 0 tokens.
TEST(SftUntrained, AStepWithoutTargetsIsAWarningNamingItsSamples) {
  ASSERT_TRUE(fs::exists(zerotrain_binary()));
  TempDir tmp;
  const fs::path data = write_records(tmp.path(), 1, 3);
  const ShellResult r = train(write_config(tmp.path(), data.string(), "", "", 1, 4));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("no token of its batch is a target"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train_000000.bin, sample "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(further such steps are not said)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" | targets 0"), std::string::npos) << r.out;
}
