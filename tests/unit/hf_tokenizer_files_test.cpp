// The tokenizer files of a saved HF directory (issue 19 items 1-2): every kind zerotrain
// reads goes in under HF's names with a tokenizer_config.json + special_tokens_map.json,
// carried over byte for byte when the source has them, written otherwise so that
// AutoTokenizer encodes as we do (checked against tools/hf_tokenizer_oracle.py, which
// rebuilds transformers 5's resolution with PyPI tokenizers and sentencepiece); and
// tokenizer_config.json's add_bos_token / add_eos_token / add_prefix_space are followed
// when loading. The GPU machine's tools/hf_load_check.py checks the same with
// transformers itself.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/tokenizer.h"
#include "io/tokenizer_config.h"
#include "model/config.h"
#include "model/hf_dir.h"
#include "model/transformer.h"

namespace fs = std::filesystem;
using namespace zt;
using nlohmann::json;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("hf_tok_")) {}
};

std::string source(const std::string& rel) { return std::string(ZT_SOURCE_DIR) + "/" + rel; }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

json read_json(const std::string& path) { return json::parse(read_all(path)); }

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// A small model whose vocabulary holds the tokenizer's ids.
std::unique_ptr<model::Transformer> tiny_model(const std::string& preset, int64_t vocab) {
  model::ModelConfig c = model::preset_config(preset);
  c.vocab_size = vocab;
  model::ModelOptions o;
  o.allocate_grads = false;
  auto m = std::make_unique<model::Transformer>(c, o);
  m->init_weights(1);
  return m;
}

std::string save_with(const model::Transformer& m, const std::string& dir, const std::string& tokenizer) {
  model::SavePretrainedOptions o;
  o.tokenizer_files = {tokenizer};
  model::save_pretrained(m, dir, o);
  return dir;
}

// A byte-level BPE trained on a license text, under a name HF does not look for.
std::string trained_tokenizer(const TempDir& tmp) {
  io::BpeTrainOptions o;
  o.vocab_size = 400;
  return tmp.write("my_tok.json", io::train_bpe_tokenizer_json({io::read_text_file(source("data/text/artistic.txt"))}, o));
}

bool have_sentencepiece() {
  try {
    io::load_tokenizer(source("tests/data/hf/llama2_tokenizer.model"));
    return true;
  } catch (const Error&) {
    return false;
  }
}

const std::vector<std::string> kTexts = {"Hello world", "The license grants you the right to copy.",
                                         "  numbers 12345 and\ttabs\n", "caf\xC3\xA9 <|endoftext|> end"};

// Our ids (BOS/EOS as our encoder adds them) against the oracle's for every text.
void expect_oracle_agrees(const std::string& dir, const std::string& want_class) {
  const std::string texts = dir + ".texts.json", log = dir + ".oracle.json";
  std::ofstream(texts) << json(kTexts).dump();
  const std::string cmd = std::string("'") + ZT_PYTHON3 + "' '" + ZT_TOOLS_DIR + "/hf_tokenizer_oracle.py' '" + dir +
                          "' '" + texts + "' > '" + log + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = read_all(log);
  ASSERT_EQ(rc, 0) << out << "(the oracle needs the .venv with PyPI tokenizers + sentencepiece: "
                   << "scripts/install_deps.sh)";
  const json j = json::parse(out);
  EXPECT_EQ(j.at("class"), want_class);
  const auto tok = io::load_tokenizer(dir);
  for (size_t i = 0; i < kTexts.size(); ++i)
    EXPECT_EQ(tok->encode(kTexts[i], io::SpecialTokens::Add), j.at("ids")[i].get<std::vector<int32_t>>())
        << dir << ": '" << kTexts[i] << "'";
}

}  // namespace

// Issue 19: final/ got vocab.json without merges.txt and no tokenizer_config.json.
TEST(HfTokenizerFiles, Gpt2VocabPairGetsMergesAndAGpt2TokenizerConfig) {
  TempDir tmp;
  const auto m = tiny_model("tiny-gpt2", 50257);
  const std::string dir = save_with(*m, tmp.file("model"), source("tests/data/gpt2/vocab.json"));
  const std::set<std::string> want = {"config.json",  "generation_config.json", "model.safetensors",
                                      "vocab.json",   "merges.txt",             "tokenizer_config.json",
                                      "special_tokens_map.json"};
  EXPECT_EQ(names_in(dir), want);
  EXPECT_TRUE(read_all(dir + "/merges.txt") == read_all(source("tests/data/gpt2/merges.txt")));
  const json c = read_json(dir + "/tokenizer_config.json");
  EXPECT_EQ(c.at("tokenizer_class"), "GPT2Tokenizer");
  for (const char* key : {"bos_token", "eos_token", "unk_token"}) EXPECT_EQ(c.at(key), "<|endoftext|>") << key;
  EXPECT_TRUE(c.at("pad_token").is_null());
  EXPECT_EQ(c.at("add_bos_token"), false);
  EXPECT_EQ(c.at("add_prefix_space"), false);
  EXPECT_EQ(c.at("model_max_length"), 256);
  EXPECT_EQ(read_json(dir + "/special_tokens_map.json"),
            json({{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}}));
  const auto tok = io::load_tokenizer(dir);
  EXPECT_EQ(tok->encode("Hello world", io::SpecialTokens::Add), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok->hf_class(), "GPT2Tokenizer");
  expect_oracle_agrees(dir, "GPT2Tokenizer");
}

// Issue 19: a model trained with its own tokenizer.json got no tokenizer_config.json, and
// transformers 5 rebuilt a Llama / GPT-2 pipeline around its vocabulary (ids past it).
TEST(HfTokenizerFiles, TokenizerJsonUnderAnyNameIsSavedAsPreTrainedTokenizerFast) {
  TempDir tmp;
  const auto m = tiny_model("tiny-llama", 512);
  const std::string tok_file = trained_tokenizer(tmp);
  const std::string dir = save_with(*m, tmp.file("model"), tok_file);
  EXPECT_FALSE(fs::exists(dir + "/my_tok.json"));
  EXPECT_TRUE(read_all(dir + "/tokenizer.json") == read_all(tok_file));
  const json c = read_json(dir + "/tokenizer_config.json");
  EXPECT_EQ(c.at("tokenizer_class"), "PreTrainedTokenizerFast");
  EXPECT_EQ(c.at("bos_token"), "<|endoftext|>");
  EXPECT_EQ(c.at("eos_token"), "<|endoftext|>");
  EXPECT_TRUE(c.at("unk_token").is_null());  // none in the vocabulary: HF would add one past it
  EXPECT_EQ(c.at("add_bos_token"), false);
  EXPECT_EQ(c.at("add_eos_token"), false);
  expect_oracle_agrees(dir, "PreTrainedTokenizer");
}

TEST(HfTokenizerFiles, SentencePieceModelGetsALlamaTokenizerConfig) {
  if (!have_sentencepiece()) GTEST_SKIP() << "built without SentencePiece";
  TempDir tmp;
  const auto m = tiny_model("tiny-llama", 512);
  const std::string dir = save_with(*m, tmp.file("model"), source("tests/data/hf/llama2_tokenizer.model"));
  EXPECT_TRUE(read_all(dir + "/tokenizer.model") == read_all(source("tests/data/hf/llama2_tokenizer.model")));
  const json c = read_json(dir + "/tokenizer_config.json");
  EXPECT_EQ(c.at("tokenizer_class"), "LlamaTokenizer");
  EXPECT_EQ(c.at("bos_token"), "<s>");
  EXPECT_EQ(c.at("eos_token"), "</s>");
  EXPECT_EQ(c.at("unk_token"), "<unk>");
  EXPECT_EQ(c.at("add_bos_token"), true);
  EXPECT_EQ(c.at("add_eos_token"), false);
  // The fixture's ids, which transformers 5.17's AutoTokenizer gave for its directory.
  const json expected = read_json(source("tests/data/hf/llama2/expected.json"));
  EXPECT_EQ(io::load_tokenizer(dir)->encode(expected.at("prompt"), io::SpecialTokens::Add),
            expected.at("hf_prompt_ids").get<std::vector<int32_t>>());
  expect_oracle_agrees(dir, "LlamaTokenizer");
}

// A source with its own tokenizer_config.json (and chat template): carried as it is, and
// nothing written in its place.
TEST(HfTokenizerFiles, SourceConfigAndChatTemplateAreCarriedOverByteForByte) {
  if (!have_sentencepiece()) GTEST_SKIP() << "built without SentencePiece";
  TempDir tmp;
  const auto m = tiny_model("tiny-llama", 512);
  const fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  for (const char* f : {"tokenizer.model", "tokenizer_config.json"})
    fs::copy_file(source("tests/data/hf/llama2/") + f, src / f);
  const std::string chat = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  std::ofstream(src / "chat_template.jinja") << chat;
  for (const std::string& from : {src.string(), (src / "tokenizer.model").string()}) {
    SCOPED_TRACE(from);
    const std::string dir = save_with(*m, tmp.file("model"), from);
    EXPECT_TRUE(read_all(dir + "/tokenizer_config.json") == read_all((src / "tokenizer_config.json").string()));
    EXPECT_EQ(read_all(dir + "/chat_template.jinja"), chat);
    EXPECT_FALSE(fs::exists(dir + "/special_tokens_map.json"));
    expect_oracle_agrees(dir, "LlamaTokenizer");
  }
}

// Item 2: tokenizer_config.json's add_bos_token / add_eos_token replace a tokenizer.json's
// post-processor (as transformers' TokenizersBackend does); carried into the output, which
// then encodes the same way.
TEST(HfTokenizerFiles, AddBosAndAddEosOfTheConfigAreFollowed) {
  TempDir tmp;
  const std::string tok_file = trained_tokenizer(tmp);
  const std::vector<int32_t> plain = io::load_tokenizer(tok_file)->encode("Hello world", io::SpecialTokens::Add);
  tmp.write("tokenizer_config.json",
            R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": true, "add_eos_token": true,
                "bos_token": {"content": "<|endoftext|>"}, "eos_token": "<|endoftext|>",
                "chat_template": "{{ messages }}"})");
  const auto tok = io::load_tokenizer(tok_file);
  const int32_t eot = tok->eos_id();
  std::vector<int32_t> want = {eot};
  want.insert(want.end(), plain.begin(), plain.end());
  want.push_back(eot);
  EXPECT_EQ(tok->encode("Hello world", io::SpecialTokens::Add), want);
  EXPECT_EQ(tok->encode("Hello world", io::SpecialTokens::Skip), plain);
  const auto m = tiny_model("tiny-llama", 512);
  const std::string dir = save_with(*m, tmp.file("model"), tok_file);
  EXPECT_TRUE(read_all(dir + "/tokenizer_config.json") == read_all(tmp.file("tokenizer_config.json")));
  expect_oracle_agrees(dir, "PreTrainedTokenizer");

  // GPT-2's pair: add_bos_token and add_prefix_space.
  const fs::path gpt2 = tmp.path() / "gpt2";
  fs::create_directories(gpt2);
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(source("tests/data/gpt2/") + f, gpt2 / f);
  std::ofstream(gpt2 / "tokenizer_config.json")
      << R"({"tokenizer_class": "GPT2Tokenizer", "add_bos_token": true, "add_prefix_space": true})";
  const auto g = io::load_tokenizer(gpt2.string());
  EXPECT_EQ(g->encode("Hello world", io::SpecialTokens::Add), (std::vector<int32_t>{50256, 18435, 995}));
  EXPECT_EQ(g->encode("Hello world", io::SpecialTokens::Skip), (std::vector<int32_t>{18435, 995}));

  if (have_sentencepiece()) {
    const fs::path sp = tmp.path() / "sp";
    fs::create_directories(sp);
    fs::copy_file(source("tests/data/hf/llama2_tokenizer.model"), sp / "tokenizer.model");
    std::ofstream(sp / "tokenizer_config.json") << R"({"add_bos_token": false, "add_eos_token": true})";
    const auto s = io::load_tokenizer(sp.string());
    std::vector<int32_t> ids = s->encode("Hello", io::SpecialTokens::Skip);
    ids.push_back(2);
    EXPECT_EQ(s->encode("Hello", io::SpecialTokens::Add), ids);
  }
}

TEST(HfTokenizerFiles, BadConfigsAndEmptyVocabulariesAreErrorsNamingTheFile) {
  TempDir tmp;
  const std::string tok_file = trained_tokenizer(tmp);
  auto expect_bad = [](const std::string& path, const std::vector<std::string>& needles) {
    try {
      io::load_tokenizer(path);
      ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  // A BOS HF would have to add past the vocabulary.
  tmp.write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<s>"})");
  expect_bad(tok_file, {"my_tok.json", "add_bos_token", "'<s>'", "not in the vocabulary"});
  tmp.write("tokenizer_config.json", R"({"add_eos_token": "yes"})");
  expect_bad(tok_file, {"tokenizer_config.json", "add_eos_token", "true or false"});
  tmp.write("tokenizer_config.json", "{not json");
  expect_bad(tok_file, {"tokenizer_config.json", "not valid JSON"});
  // An empty vocab.json encodes nothing: an error naming it.
  const fs::path empty = tmp.path() / "empty";
  fs::create_directories(empty);
  std::ofstream(empty / "vocab.json") << "{}";
  std::ofstream(empty / "merges.txt") << "#version: 0.2\n";
  expect_bad(empty.string(), {"vocab.json", "empty"});
  // The byte tokenizer has no HF form.
  try {
    io::make_hf_tokenizer_config(*io::make_byte_tokenizer(), 256);
    ADD_FAILURE() << "the byte tokenizer got a tokenizer_config.json";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
  }
}
