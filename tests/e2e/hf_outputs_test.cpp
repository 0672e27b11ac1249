// Trained outputs HF loads as they are (issue 19 item 1): config.json names the
// tokenizer's BOS / EOS (the gpt2 preset's 50256, a preset trained with Llama-2's
// tokenizer.model 1 and 2); final/ and `zerotrain consolidate` (the run's tokenizer by
// default) hold every tokenizer file with its tokenizer_config.json, so `zerotrain eval
// --model final/` runs on GPT-2's vocab.json + merges.txt; eval --dump-logits writes the
// logits tools/hf_load_check.py compares with transformers'.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/shell.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "model/inference.h"
#include "model/inference_load.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace zt;
using nlohmann::json;
using zt::testing::file_bytes;
using zt::testing::sh;
using zt::testing::small_run;
using zt::testing::zerotrain_binary;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("hf_out_")) {}
};

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

}  // namespace

TEST(HfOutputs, Gpt2PresetsNameGpt2sEndOfText) {
  for (const char* p : {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}) {
    EXPECT_EQ(model::preset_config(p).bos_token_id, 50256) << p;
    EXPECT_EQ(model::preset_config(p).eos_token_id, 50256) << p;
  }
}

// Issue 19's case: GPT-2's classic pair; final/ had vocab.json without merges.txt.
TEST(HfOutputs, Gpt2VocabPairRunEvaluatesDumpsLogitsAndConsolidates) {
  ASSERT_TRUE(fs::exists(zerotrain_binary())) << "build the zerotrain target first";
  TempDir tmp;
  // No bos/eos in the file: GPT2Config's defaults (50256) hold, as in HF.
  std::ofstream(tmp.path() / "config.json") << R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 32,
    "n_positions": 64, "vocab_size": 50257})";
  const train::TrainResult r = train::run_training(small_run(
      tmp.path(), {"--model.preset", "", "--model.config", (tmp.path() / "config.json").string(), "--model.tokenizer",
                   std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2/vocab.json", "--max_steps", "2", "--save_interval",
                   "2", "--eval_interval", "0"}));
  const fs::path final_dir = r.final_model_dir;
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
    EXPECT_TRUE(fs::exists(final_dir / f)) << f;
  const json cj = read_json(final_dir / "config.json");
  EXPECT_EQ(cj.at("bos_token_id"), 50256);
  EXPECT_EQ(cj.at("eos_token_id"), 50256);
  EXPECT_EQ(read_json(final_dir / "tokenizer_config.json").at("tokenizer_class"), "GPT2Tokenizer");

  // eval on final/ as it is, and its logits.
  std::ofstream(tmp.path() / "docs.jsonl") << R"({"text": "Hello world, this is a test."})" << "\n"
                                           << R"({"text": "Short"})" << "\n";
  const std::string logits = (tmp.path() / "logits.safetensors").string();
  const auto e = sh(zerotrain_binary() + " eval --model " + final_dir.string() + " --data " +
                    (tmp.path() / "docs.jsonl").string() + " --dump-logits " + logits);
  ASSERT_EQ(e.rc, 0) << e.out;
  EXPECT_NE(e.out.find("mean loss"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("wrote the logits of 2 documents"), std::string::npos) << e.out;
  const auto tok = io::load_tokenizer(final_dir.string());
  model::InferenceModel m = model::load_for_inference(final_dir.string());
  io::SafetensorsReader file(logits);
  const std::vector<std::string> texts = {"Hello world, this is a test.", "Short"};
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(texts[i]);
    const std::vector<int32_t> ids = tok->encode(texts[i], io::SpecialTokens::Add);
    const Tensor got_ids = file.tensor("input_ids." + std::to_string(i));
    ASSERT_EQ(got_ids.numel(), static_cast<int64_t>(ids.size()));
    EXPECT_EQ(std::vector<int32_t>(got_ids.data_as<int32_t>(), got_ids.data_as<int32_t>() + ids.size()), ids);
    const Tensor l = file.tensor("logits." + std::to_string(i));
    ASSERT_EQ(l.shape(), (Shape{static_cast<int64_t>(ids.size()), 50257}));
    // Each row t is the forward of ids[0..t]'s last position.
    for (size_t t : {size_t{0}, ids.size() - 1}) {
      model::InferenceEngine engine(*m.model);
      const std::vector<float> want =
          engine.forward(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(t) + 1));
      const float* row = l.data_as<float>() + t * 50257;
      float worst = 0;
      for (size_t v = 0; v < want.size(); ++v) worst = std::max(worst, std::fabs(row[v] - want[v]));
      EXPECT_LE(worst, 1e-5f) << "row " << t;
    }
  }

  // consolidate without --tokenizer: the run's own tokenizer, as final/ has it.
  const std::string out = (tmp.path() / "hf").string();
  const auto c = sh(zerotrain_binary() + " consolidate " + (fs::path(r.final_model_dir).parent_path() / "checkpoints")
                                                                 .string() + " " + out + " --quiet");
  ASSERT_EQ(c.rc, 0) << c.out;
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
    EXPECT_EQ(file_bytes(fs::path(out) / f), file_bytes(final_dir / f)) << f;
  const auto e2 = sh(zerotrain_binary() + " eval --model " + out + " --data " + (tmp.path() / "docs.jsonl").string());
  EXPECT_EQ(e2.rc, 0) << e2.out;
  // A dump that cannot be made says why.
  std::ofstream(tmp.path() / "long.txt") << std::string(400, 'x') + " " + std::string(400, 'y');
  const auto bad = sh(zerotrain_binary() + " eval --model " + final_dir.string() + " --data " +
                      (tmp.path() / "long.txt").string() + " --dump-logits " + logits);
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("context of 64"), std::string::npos) << bad.out;
}

// A preset trained with Llama-2's tokenizer.model: config.json says its BOS / EOS (1, 2),
// not the preset's placeholders; final/ has tokenizer.model with a LlamaTokenizer config.
TEST(HfOutputs, PresetTakesTheTokenizersBosAndEos) {
  TempDir tmp;
  const std::string sp = std::string(ZT_SOURCE_DIR) + "/tests/data/hf/llama2_tokenizer.model";
  try {
    io::load_tokenizer(sp);
  } catch (const Error&) {
    GTEST_SKIP() << "built without SentencePiece";
  }
  const train::TrainResult r = train::run_training(small_run(
      tmp.path(), {"--model.preset", "tiny-llama", "--model.tokenizer", sp, "--max_steps", "1", "--save_strategy",
                   "no", "--eval_interval", "0"}));
  const fs::path final_dir = r.final_model_dir;
  const json cj = read_json(final_dir / "config.json");
  EXPECT_EQ(cj.at("bos_token_id"), 1);
  EXPECT_EQ(cj.at("eos_token_id"), 2);
  EXPECT_EQ(read_json(final_dir / "generation_config.json").at("eos_token_id"), 2);
  EXPECT_EQ(file_bytes(final_dir / "tokenizer.model"), file_bytes(sp));
  const json tc = read_json(final_dir / "tokenizer_config.json");
  EXPECT_EQ(tc.at("tokenizer_class"), "LlamaTokenizer");
  EXPECT_EQ(tc.at("add_bos_token"), true);
}
