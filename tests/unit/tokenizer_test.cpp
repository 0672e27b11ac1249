// Tokenizer building blocks and malformed inputs: every broken tokenizer file is one
// clear zt::Error naming the file and key, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/bpe.h"
#include "io/bpe_trainer.h"
#include "io/pretokenize.h"
#include "io/tokenizer.h"
#include "io/unicode.h"

namespace zt::io {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/zt_tokenizer_test_XXXXXX";
    if (::mkdtemp(tmpl)) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;  // best effort: a leftover temp dir must not fail the test
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::string path_;
};

// A tiny valid byte-level tokenizer.json; `model` replaces the model object when given.
std::string tiny_json(const std::string& model = "", const std::string& extra = "") {
  const std::string m = model.empty()
                            ? R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "Ġ": 6},
           "merges": ["b c", ["a", "b"]]})"
                            : model;
  return R"({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"}, )" +
         extra + R"("model": )" + m + "}";
}

// Loads `text` as a tokenizer.json and returns the error it raises.
Error load_error(const std::string& text) {
  TempDir dir;
  const std::string path = dir.write("tokenizer.json", text);
  try {
    load_tokenizer(path);
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::Internal, "no error");
}

void expect_bad_input(const std::string& text, const std::string& needle) {
  const Error e = load_error(text);
  EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
  EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "want '" << needle << "' in: " << e.what();
}

TEST(Tokenizer, MalformedJsonIsBadInput) {
  const std::string good = tiny_json();
  expect_bad_input(good.substr(0, good.size() / 2), "not valid JSON");
  expect_bad_input("this is not json", "not valid JSON");
  expect_bad_input("", "not valid JSON");
  expect_bad_input("[1, 2]", "expected a JSON object");
  expect_bad_input(R"({"version": "1.0"})", "no 'model'");
  expect_bad_input(tiny_json(R"({"type": "BPE", "merges": []})"), "'vocab'");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": 0}})"), "'merges'");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": ["a"], "merges": []})"), "model.vocab");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": "zero"}, "merges": []})"), "vocab['a']");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": -3}, "merges": []})"), "vocab['a']");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": 0}, "merges": "a b"})"), "model.merges");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [7]})"), "merges[0]");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]})"), "merges[0]");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "x"]]})"),
                   "'x', which is not in the vocab");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]})"), "makes 'ab'");
  expect_bad_input(tiny_json(R"({"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []})"), "id 0");
  expect_bad_input(tiny_json("", R"("added_tokens": [{"id": "x", "content": "<s>"}], )"), "added_tokens[0]");
  expect_bad_input(tiny_json("", R"("added_tokens": {"id": 1}, )"), "added_tokens");
}

TEST(Tokenizer, UnsupportedFeaturesSayWhat) {
  Error e = load_error(tiny_json(R"({"type": "WordPiece", "vocab": {"a": 0}})"));
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  EXPECT_NE(std::string(e.what()).find("WordPiece"), std::string::npos) << e.what();
  std::string j = tiny_json();
  j.replace(j.find(R"({"type": "ByteLevel", "add_prefix_space")"), 0, R"({"type": "Whitespace"}, "x": )");
  e = load_error(j);
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
  EXPECT_NE(std::string(e.what()).find("Whitespace"), std::string::npos) << e.what();
}

TEST(Tokenizer, MissingFilesNameThePath) {
  TempDir dir;
  try {
    load_tokenizer("/nonexistent/tok.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tok.json"), std::string::npos);
  }
  const std::string vocab = dir.write("vocab.json", R"({"a": 0})");
  EXPECT_THROW(load_tokenizer(vocab), Error);  // no merges.txt beside it
  dir.write("merges.txt", "#version: 0.2\na b c\n");
  try {
    load_tokenizer(vocab);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merges.txt:2"), std::string::npos) << e.what();
  }
  const std::string model = dir.write("broken.model", "not a protobuf");
  EXPECT_THROW(load_tokenizer(model), Error);
  // Issue 40: a device was reported as "no such file".
  try {
    load_tokenizer("/dev/null");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/null: not a regular file"), std::string::npos) << e.what();
  }
}

// transformers 5 writes a slow GPT-2 tokenizer as a tokenizer.json with an empty model
// vocabulary beside vocab.json + merges.txt (issue 19 item 2): the directory loads those;
// alone, the empty tokenizer.json is an error naming it, never an encoder of nothing.
TEST(Tokenizer, AnEmptyVocabularyIsNeverAnEncoderOfNothing) {
  TempDir dir;
  const std::string empty = R"({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "vocab": {}, "merges": []}})";
  const std::string alone = dir.write("tokenizer.json", empty);
  try {
    load_tokenizer(alone);
    FAIL() << "an empty vocabulary loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find(alone + ": the tokenizer's model has an empty vocabulary"), std::string::npos)
        << e.what();
  }
  const std::string folder = std::filesystem::path(alone).parent_path().string();
  for (const char* f : {"vocab.json", "merges.txt"})
    std::filesystem::copy_file(std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2/" + f, folder + "/" + f);
  const auto tok = load_tokenizer(folder);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->encode("Hello world", SpecialTokens::Skip), (std::vector<int32_t>{15496, 995}));
}

TEST(Tokenizer, MergeRanksAndIgnoreMerges) {
  TempDir dir;
  // "b c" outranks "a b": abc -> a + bc, and no merge makes abc from a + bc.
  auto tok = load_tokenizer(dir.write("tokenizer.json", tiny_json()));
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(tok->encode("ab"), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok->decode({0, 4, 6, 3}), "abc ab");
  // ignore_merges: a word found whole in the vocab is one token.
  auto ignoring = load_tokenizer(dir.write(
      "ignore.json",
      tiny_json(
          R"({"type": "BPE", "ignore_merges": true, "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5},
          "merges": [["b", "c"], ["a", "b"]]})")));
  EXPECT_EQ(ignoring->encode("abc"), (std::vector<int32_t>{5}));
}

TEST(Tokenizer, ByteTokenizer) {
  auto tok = make_byte_tokenizer();
  const std::string s = "h\xC3\xA9\xFF";
  const auto ids = tok->encode(s);
  EXPECT_EQ(ids, (std::vector<int32_t>{'h', 0xC3, 0xA9, 0xFF}));
  EXPECT_EQ(tok->decode(ids), s);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->kind(), "bytes");
}

TEST(Unicode, InvalidUtf8BecomesReplacementPerMaximalSubpart) {
  const std::string r = "\xEF\xBF\xBD";
  // As Python's bytes.decode("utf-8", errors="replace").
  EXPECT_EQ(unicode::to_valid_utf8("a\xE2\x82"
                                   "b"),
            "a" + r + "b");
  EXPECT_EQ(unicode::to_valid_utf8("\xC0\xAF"), r + r);
  EXPECT_EQ(unicode::to_valid_utf8("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(unicode::to_valid_utf8("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(unicode::to_valid_utf8("\xF0\x9F\x8E"), r);
  EXPECT_EQ(unicode::to_valid_utf8("ok \xE6\x97\xA5"), "ok \xE6\x97\xA5");
}

TEST(Unicode, Classes) {
  using unicode::classify;
  using C = unicode::CodePointClass;
  EXPECT_EQ(classify('a'), C::Letter);
  EXPECT_EQ(classify(0x65E5), C::Letter);  // 日
  EXPECT_EQ(classify(0x0663), C::Number);  // Arabic-Indic three
  EXPECT_EQ(classify(0x00BD), C::Number);  // ½
  EXPECT_EQ(classify(0x3000), C::Space);
  EXPECT_EQ(classify(0x200B), C::Other);    // zero width space is not \s
  EXPECT_EQ(classify(0x1F389), C::Other);   // 🎉
  EXPECT_EQ(classify(0x20000), C::Letter);  // CJK extension B
}

std::vector<std::string> split(KnownRegex re, const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t e = match_known_regex(re, text, i);
    out.push_back(text.substr(i, e - i));
    i = e;
  }
  return out;
}

TEST(PreTokenize, Gpt2Regex) {
  EXPECT_EQ(split(KnownRegex::Gpt2, "Hello  world's 123abc!!\n\n  x  "),
            (std::vector<std::string>{"Hello", " ", " world", "'s", " 123", "abc", "!!", "\n\n ", " x", "  "}));
  EXPECT_EQ(split(KnownRegex::Gpt2, "IT'S"), (std::vector<std::string>{"IT", "'", "S"}));
}

TEST(PreTokenize, Llama3Regex) {
  // Checked against tokenizers' Split(Llama-3 regex): case-insensitive contractions
  // (ASCII only), one leading non-letter, digits in threes, line breaks kept with punctuation.
  EXPECT_EQ(split(KnownRegex::Llama3, "'Sam 'ſam IT'S 1234567 (x) a.\n\nb \t\n c"),
            (std::vector<std::string>{"'S", "am", " '", "ſam", " IT", "'S", " ", "123", "456", "7", " (", "x", ")",
                                      " a", ".\n\n", "b", " \t\n", " c"}));
  EXPECT_EQ(split(KnownRegex::Qwen2, "12345"), (std::vector<std::string>{"1", "2", "3", "4", "5"}));
}

TEST(PreTokenize, SplitBehaviors) {
  // HF's documented example: "the-final--countdown" split on "-".
  auto run = [](SplitBehavior b) {
    PreTokenizerStep step;
    step.matcher = make_literal_matcher("-");
    step.behavior = b;
    PreTokenizer pre({step});
    std::vector<std::string_view> pieces;
    std::deque<std::string> storage;
    pre.run("the-final--countdown", pieces, storage);
    return std::vector<std::string>(pieces.begin(), pieces.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(run(SplitBehavior::Removed), (V{"the", "final", "countdown"}));
  EXPECT_EQ(run(SplitBehavior::Isolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run(SplitBehavior::MergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run(SplitBehavior::MergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run(SplitBehavior::Contiguous), (V{"the", "-", "final", "--", "countdown"}));
}

TEST(Bpe, ByteMap) {
  EXPECT_EQ(bytes_to_byte_level(" "), "\xC4\xA0");   // Ġ
  EXPECT_EQ(bytes_to_byte_level("\n"), "\xC4\x8A");  // Ċ
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(std::string(1, static_cast<char>(b)))),
              std::string(1, static_cast<char>(b)));
  EXPECT_FALSE(byte_level_to_bytes(" ").has_value());  // U+0020 is not a byte image
}

TEST(BpeTrainer, TrainsAndRoundTrips) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  BpeTrainOptions o;
  o.vocab_size = 300;
  auto tok = train_bpe_tokenizer({text}, o);
  EXPECT_EQ(tok->vocab_size(), 300);
  EXPECT_EQ(tok->token(0), "<|endoftext|>");
  EXPECT_EQ(tok->eos_id(), 0);
  const auto ids = tok->encode(text);
  EXPECT_LT(ids.size(), text.size() / 3);  // merges compress the repeated words
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->encode("<|endoftext|> the"), (std::vector<int32_t>{0, tok->encode(" the")[0]}));
  o.vocab_size = 100;
  EXPECT_THROW(train_bpe_tokenizer({text}, o), Error);
}

}  // namespace
}  // namespace zt::io

namespace zt::io {
namespace {

// Regexes other than the built-in three go to PCRE2 when built with it, else a clear
// Unsupported error naming the pattern.
TEST(PreTokenize, OtherRegexNeedsPcre2) {
#ifdef ZT_WITH_PCRE2
  PreTokenizerStep step;
  step.matcher = make_regex_matcher(R"(\p{N}+)", "test");
  step.behavior = SplitBehavior::Isolated;
  PreTokenizer pre({step});
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  pre.run("ab12c٣4", pieces, storage);
  EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()), (std::vector<std::string>{"ab", "12", "c", "٣4"}));
#else
  try {
    make_regex_matcher(R"(\p{N}+)", "tokenizer.json: pre_tokenizer.pattern.Regex");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find(R"(\p{N}+)"), std::string::npos) << e.what();
  }
#endif
  EXPECT_NE(dynamic_cast<const Matcher*>(make_regex_matcher(kLlama3Regex, "test").get()), nullptr);
  EXPECT_TRUE(make_regex_matcher(kGpt2Regex, "test")->tiles());  // built-in, no PCRE2
}

}  // namespace
}  // namespace zt::io
