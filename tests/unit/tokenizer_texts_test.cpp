// The texts a preset's tokenizer is trained on (train/tokenizer_texts.h): supervised
// fine-tuning records count as their rendering (prompt + response, Alpaca's prompt format,
// a conversation through data.chat_template), plain records as their field; bad records
// name file:line or are skipped.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "config/config.h"
#include "core/error.h"
#include "train/tokenizer_texts.h"

using namespace zt;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("tok_texts_")) {}
};

config::TrainConfig config_reading(const std::string& path) {
  config::TrainConfig c;
  c.source = "run.yaml";
  c.data.train = {path};
  return c;
}

}  // namespace

TEST(TokenizerTexts, SftRecordsCountAsTheirRendering) {
  TempDir dir;
  const std::string path = dir.write(
      "sft.jsonl",
      "{\"prompt\": \"Q: 2+2? \", \"response\": \"4\"}\n"
      "\n"
      "{\"instruction\": \"Add.\", \"input\": \"\", \"output\": \"Done\"}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
  config::TrainConfig c = config_reading(path);
  c.data.chat_template = "chatml";  // conversations need one; it then renders every SFT record, as prepare does
  const std::vector<std::string> texts = train::tokenizer_training_texts(c);
  ASSERT_EQ(texts.size(), 3u);
  EXPECT_EQ(texts[0], "<|im_start|>user\nQ: 2+2? <|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n");
  EXPECT_NE(texts[1].find("Add."), std::string::npos);
  EXPECT_NE(texts[1].find("<|im_start|>assistant\nDone<|im_end|>"), std::string::npos) << texts[1];
  EXPECT_NE(texts[2].find("<|im_start|>assistant\nyo<|im_end|>"), std::string::npos) << texts[2];
  // No template named: prompt + response, and Alpaca's prompt format.
  const std::string plain = dir.write("pr.jsonl",
                                      "{\"prompt\": \"Q: 2+2? \", \"response\": \"4\"}\n"
                                      "{\"instruction\": \"Add.\", \"output\": \"Done\"}\n");
  const std::vector<std::string> own = train::tokenizer_training_texts(config_reading(plain));
  ASSERT_EQ(own.size(), 2u);
  EXPECT_EQ(own[0], "Q: 2+2? 4");
  EXPECT_NE(own[1].find("### Instruction:\nAdd."), std::string::npos) << own[1];
  EXPECT_EQ(own[1].substr(own[1].size() - 4), "Done");
}

TEST(TokenizerTexts, PlainRecordsAndTextFilesAreUnchanged) {
  TempDir dir;
  const std::string jsonl = dir.write("a.jsonl", "{\"text\": \"one\"}\n{\"text\": \"\"}\n{\"text\": \"two\"}\n");
  const std::string txt = dir.write("b.txt", "a whole file\n");
  config::TrainConfig c = config_reading(jsonl);
  c.data.train.push_back(txt);
  EXPECT_EQ(train::tokenizer_training_texts(c), (std::vector<std::string>{"one", "two", "a whole file\n"}));
}

TEST(TokenizerTexts, BadRecordsNameTheLineOrAreSkipped) {
  TempDir dir;
  const std::string path = dir.write("bad.jsonl", "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"other\": 1}\n");
  config::TrainConfig c = config_reading(path);
  try {
    train::tokenizer_training_texts(c);
    FAIL() << "a record of no known kind was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  c.data.skip_bad_records = true;
  EXPECT_EQ(train::tokenizer_training_texts(c), (std::vector<std::string>{"ab"}));
  // A conversation with no template named: the error says so (a new tokenizer has none).
  const std::string conv =
      dir.write("conv.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, "
                              "{\"role\": \"assistant\", \"content\": \"a\"}]}\n");
  EXPECT_THROW(train::tokenizer_training_texts(config_reading(conv)), Error);
}
