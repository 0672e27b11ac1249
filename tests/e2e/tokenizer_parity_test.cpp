// Tokenizer parity with the reference libraries (tools/tokenizer_oracle.py): GPT-2's real
// vocabulary (vocab.json + merges.txt, and as tokenizer.json), a Llama-3-style
// tokenizer.json (Split regex + ByteLevel, ignore_merges, BOS template, added tokens with
// lstrip/rstrip/single_word; merges in both spellings), a SentencePiece BPE model with
// byte fallback, and a tokenizer trained by zerotrain loaded by PyPI tokenizers. Every
// document of a varied corpus (code, CJK, emoji, whitespace runs, contractions, long
// numbers, invalid UTF-8), the whole corpus, and decoding must match exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/tokenizer.h"

namespace zt::io {
namespace {

std::vector<std::string> read_corpus(const std::string& path) {
  const std::string data = read_text_file(path);
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < data.size();) {
    const size_t nl = data.find('\n', pos);
    const size_t n = std::stoul(data.substr(pos, nl - pos));
    docs.push_back(data.substr(nl + 1, n));
    pos = nl + 1 + n;
  }
  return docs;
}

int run(const std::string& cmd) { return std::system(cmd.c_str()); }

class TokenizerParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/zt_tokenizer_parity_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(run(std::string(ZT_PYTHON3) + " " + ZT_TOOLS_DIR + "/tokenizer_oracle.py prepare " + dir_), 0)
        << "the oracle needs PyPI tokenizers and sentencepiece (scripts/install_deps.sh)";
    docs_ = read_corpus(dir_ + "/corpus.bin");
    expected_ = nlohmann::json::parse(read_text_file(dir_ + "/expected.json"));
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) run("rm -rf '" + dir_ + "'");
  }

  // Compares everything for one tokenizer against the oracle's results.
  static void check(const Tokenizer& tok, const nlohmann::json& exp, const std::string& name) {
    size_t mismatches = 0, decode_mismatches = 0;
    ASSERT_EQ(exp["plain"].size(), docs_.size());
    std::string whole;
    for (size_t i = 0; i < docs_.size(); ++i) {
      whole += docs_[i];
      const auto plain = tok.encode(docs_[i], SpecialTokens::Skip);
      const auto special = tok.encode(docs_[i], SpecialTokens::Add);
      const auto want = exp["plain"][i].get<std::vector<int32_t>>();
      if (plain != want || special != exp["special"][i].get<std::vector<int32_t>>()) {
        if (++mismatches <= 3) ADD_FAILURE() << name << ": document " << i << " '" << docs_[i] << "' differs";
      }
      if (tok.decode(want, false) != exp["decoded"][i].get<std::string>() ||
          tok.decode(want, true) != exp["decoded_skip"][i].get<std::string>()) {
        if (++decode_mismatches <= 3)
          ADD_FAILURE() << name << ": decode of document " << i << " gives '" << tok.decode(want, false) << "', want '"
                        << exp["decoded"][i].get<std::string>() << "'";
      }
    }
    EXPECT_EQ(mismatches, 0u) << name << ": documents whose ids differ, of " << docs_.size();
    EXPECT_EQ(decode_mismatches, 0u) << name;
    EXPECT_EQ(tok.encode(whole, SpecialTokens::Skip), exp["whole"].get<std::vector<int32_t>>())
        << name << ": whole corpus";
  }

  static std::string dir_;
  static std::vector<std::string> docs_;
  static nlohmann::json expected_;
};
std::string TokenizerParity::dir_;
std::vector<std::string> TokenizerParity::docs_;
nlohmann::json TokenizerParity::expected_;

TEST_F(TokenizerParity, Gpt2VocabAndMerges) {
  const auto tok = load_tokenizer(std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2");
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eos_id(), 50256);
  check(*tok, expected_["gpt2"], "gpt2 vocab.json");
}

TEST_F(TokenizerParity, Gpt2TokenizerJson) {
  check(*load_tokenizer(dir_ + "/gpt2_json/tokenizer.json"), expected_["gpt2"], "gpt2 tokenizer.json");
}

TEST_F(TokenizerParity, Gpt2PrefixSpaceAndSuffixTemplate) {
  check(*load_tokenizer(dir_ + "/gpt2_prefix/tokenizer.json"), expected_["gpt2_prefix"], "gpt2 add_prefix_space");
}

TEST_F(TokenizerParity, Llama3StyleTokenizerJson) {
  const auto tok = load_tokenizer(dir_ + "/llama3");
  EXPECT_GE(tok->bos_id(), 0);
  EXPECT_EQ(tok->token(tok->bos_id()), "<|begin_of_text|>");
  check(*tok, expected_["llama3"], "llama3");
}

TEST_F(TokenizerParity, Llama3StyleLegacyMergeStrings) {
  check(*load_tokenizer(dir_ + "/llama3_legacy/tokenizer.json"), expected_["llama3_legacy"], "llama3 legacy merges");
}

TEST_F(TokenizerParity, SentencePieceBpeWithByteFallback) {
  const auto tok = load_tokenizer(dir_ + "/sp/tokenizer.model");
  EXPECT_EQ(tok->kind(), "sentencepiece");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  check(*tok, expected_["sp"], "sentencepiece");
}

TEST_F(TokenizerParity, TrainedByZerotrainLoadsInHfTokenizers) {
  BpeTrainOptions o;
  o.vocab_size = 700;
  std::vector<std::string> texts = docs_;
  const std::string path = dir_ + "/trained.json";
  {
    std::ofstream out(path, std::ios::binary);
    out << train_bpe_tokenizer_json(texts, o);
  }
  const std::string exp_path = dir_ + "/trained_expected.json";
  ASSERT_EQ(run(std::string(ZT_PYTHON3) + " " + ZT_TOOLS_DIR + "/tokenizer_oracle.py encode " + path + " " + dir_ +
                "/corpus.bin " + exp_path),
            0);
  const auto tok = load_tokenizer(path);
  EXPECT_EQ(tok->vocab_size(), 700);
  check(*tok, nlohmann::json::parse(read_text_file(exp_path)), "trained");
}

}  // namespace
}  // namespace zt::io
