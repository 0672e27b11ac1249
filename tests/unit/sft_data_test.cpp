// Supervised fine-tuning data: record kinds and their loss masks (io/sft_record.h), the
// version 2 shard (mask + samples) and the loader's windows (padded per sample, packed),
// and `prepare` on SFT JSONL: kinds detected per record, bad records named by file:line or
// counted and skipped (io/prepare.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/prepare.h"
#include "io/sft_record.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"

using namespace zt;
using namespace zt::io;
using json = nlohmann::json;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("sft_")) {}
};

std::vector<int32_t> bytes_of(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

// The ids whose mask is 1, as text (bytes tokenizer).
std::string counted(const SftSample& s) {
  std::string out;
  for (size_t i = 0; i < s.ids.size(); ++i)
    if (s.mask[i]) out += s.ids[i] == 0 ? std::string("<eos>") : std::string(1, static_cast<char>(s.ids[i]));
  return out;
}

SftSample encode(const std::string& record, const std::string& chat_template = "", int64_t eos = 0) {
  const auto tok = make_byte_tokenizer();
  SftEncoderOptions o;
  o.chat_template = chat_template;
  o.eos_id = eos;
  SftEncoder enc(*tok, o);
  const json j = json::parse(record);
  RecordKind kind;
  EXPECT_TRUE(detect_record_kind(j, "text", kind)) << record;
  return enc.encode(j, kind);
}

}  // namespace

TEST(SftRecords, KindsAreDetectedPerRecord) {
  RecordKind k;
  ASSERT_TRUE(detect_record_kind(json::parse(R"({"text": "x"})"), "text", k));
  EXPECT_EQ(k, RecordKind::Text);
  ASSERT_TRUE(detect_record_kind(json::parse(R"({"messages": []})"), "text", k));
  EXPECT_EQ(k, RecordKind::Messages);
  ASSERT_TRUE(detect_record_kind(json::parse(R"({"conv": [{"role": "user", "content": "a"}]})"), "conv", k));
  EXPECT_EQ(k, RecordKind::Messages);  // --field naming an array: a conversation
  ASSERT_TRUE(detect_record_kind(json::parse(R"({"prompt": "a", "response": "b"})"), "text", k));
  EXPECT_EQ(k, RecordKind::PromptResponse);
  ASSERT_TRUE(detect_record_kind(json::parse(R"({"prompt": "a", "completion": "b"})"), "text", k));
  EXPECT_EQ(k, RecordKind::PromptResponse);
  ASSERT_TRUE(detect_record_kind(json::parse(R"({"instruction": "a", "input": "", "output": "b"})"), "text", k));
  EXPECT_EQ(k, RecordKind::Alpaca);
  EXPECT_FALSE(detect_record_kind(json::parse(R"({"body": "x"})"), "text", k));
  EXPECT_FALSE(detect_record_kind(json::parse(R"({"prompt": "x"})"), "text", k));
}

TEST(SftRecords, PromptResponseCountsTheResponseAndEos) {
  const SftSample s = encode(R"({"prompt": "Q: hi\n", "response": "A: yo"})");
  EXPECT_EQ(s.ids, [] {
    auto v = bytes_of("Q: hi\nA: yo");
    v.push_back(0);
    return v;
  }());
  EXPECT_EQ(counted(s), "A: yo<eos>");
  EXPECT_EQ(counted(encode(R"({"prompt": "P", "completion": "C"})")), "C<eos>");
}

TEST(SftRecords, AlpacaUsesStanfordAlpacasPromptFormat) {
  const SftSample with_input = encode(R"({"instruction": "Add.", "input": "2 2", "output": "4"})");
  const std::string prompt =
      "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
      "response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### Input:\n2 2\n\n### "
      "Response:\n";
  auto expected = bytes_of(prompt + "4");
  expected.push_back(0);
  EXPECT_EQ(with_input.ids, expected);
  EXPECT_EQ(counted(with_input), "4<eos>");
  const SftSample no_input = encode(R"({"instruction": "Say hi.", "output": "hi"})");
  EXPECT_EQ(std::string(no_input.ids.begin(), no_input.ids.end() - 3),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nSay hi.\n\n### Response:\n");
  EXPECT_EQ(counted(no_input), "hi<eos>");
}

TEST(SftRecords, ConversationsCountTheAssistantTurnsWithTheirEndOfTurn) {
  const SftSample s = encode(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Q"},
                       {"role": "assistant", "content": "A"}]})",
      "chatml");
  EXPECT_EQ(std::string(s.ids.begin(), s.ids.end()),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
  // The generation prompt is not counted; the content and the template's close are. No EOS
  // is appended: the template closes the turn.
  EXPECT_EQ(counted(s), "Yo<|im_end|>\nA<|im_end|>\n");
  // Prompt/response through a named template: a user and an assistant turn.
  EXPECT_EQ(counted(encode(R"({"prompt": "P", "response": "R"})", "llama3")), "R<|eot_id|>");
}

TEST(SftRecords, MalformedConversationsAreBadInput) {
  for (const char* rec : {R"({"messages": []})", R"({"messages": [{"role": "user"}]})",
                          R"({"messages": [{"role": "user", "content": "only a question"}]})",
                          R"({"messages": [{"content": "x"}]})"}) {
    try {
      encode(rec, "chatml");
      ADD_FAILURE() << rec;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << rec;
    }
  }
  // No template anywhere: the error says how to name one.
  try {
    encode(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
  }
}

TEST(SftShards, MaskAndSamplesRoundTripAndVersion1StillLoads) {
  TempDir dir;
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<uint8_t> mask = {0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1};
  write_sft_shard(dir.file("a.bin"), ids.data(), mask.data(), 11, {0, 4, 7}, 300, 0);
  const auto shard = open_token_shard(dir.file("a.bin"));
  ASSERT_TRUE(shard->has_loss_mask());
  EXPECT_EQ(shard->sample_starts(), (std::vector<int64_t>{0, 4, 7}));
  std::vector<uint8_t> m(11);
  shard->read_mask(0, 11, m.data());
  EXPECT_EQ(m, mask);
  std::vector<int32_t> back(11);
  shard->read(0, 11, back.data());
  EXPECT_EQ(back, ids);
  write_token_shard(dir.file("v1.bin"), ids.data(), 11, 300, 0);
  const auto v1 = open_token_shard(dir.file("v1.bin"));
  EXPECT_FALSE(v1->has_loss_mask());
  EXPECT_TRUE(v1->sample_starts().empty());
  // A truncated v2 shard is exit 2, not a read past the file.
  {
    std::ifstream in(dir.file("a.bin"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir.file("cut.bin"), std::ios::binary) << bytes.substr(0, bytes.size() - 8);
  }
  EXPECT_THROW(open_token_shard(dir.file("cut.bin")), Error);
}

TEST(SftShards, PaddedPerSampleWindowsMaskPromptsAndPadding) {
  TempDir dir;
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<uint8_t> mask = {0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1};
  write_sft_shard(dir.file("a.bin"), ids.data(), mask.data(), 11, {0, 4, 7}, 300, 99);
  BatchLoader loader({dir.file("a.bin")}, 1, 3, 5);
  EXPECT_EQ(loader.windows_per_epoch(), 3);
  EXPECT_EQ(loader.samples(), 3);
  EXPECT_EQ(loader.truncated_samples(), 0);  // 4, 3 and 4 tokens fit T+1 = 4
  OwnedTensor tok({1, 3}, DType::I32), tgt({1, 3}, DType::I32);
  for (int w = 0; w < 3; ++w) {
    const int64_t start = loader.window(w).second;
    loader.next(tok, tgt);
    const int32_t* t = tok.data<int32_t>();
    const int32_t* g = tgt.data<int32_t>();
    std::vector<int32_t> tv(t, t + 3), gv(g, g + 3);
    if (start == 0) {
      EXPECT_EQ(tv, (std::vector<int32_t>{1, 2, 3}));
      EXPECT_EQ(gv, (std::vector<int32_t>{-100, 3, 4}));
    } else if (start == 4) {  // 3 tokens, then the pad (EOS) input; its target ignored
      EXPECT_EQ(tv, (std::vector<int32_t>{5, 6, 7}));
      EXPECT_EQ(gv, (std::vector<int32_t>{6, 7, -100}));
    } else {
      EXPECT_EQ(start, 7);
      EXPECT_EQ(tv, (std::vector<int32_t>{8, 9, 10}));
      EXPECT_EQ(gv, (std::vector<int32_t>{-100, -100, 11}));
    }
  }
  // Packed: windows over the samples with the same mask.
  BatchLoader packed({dir.file("a.bin")}, 1, 5, 5, 0, 1, SampleWindows::Packed);
  EXPECT_EQ(packed.windows_per_epoch(), 2);
  OwnedTensor tok5({1, 5}, DType::I32), tgt5({1, 5}, DType::I32);
  for (int w = 0; w < 2; ++w) {
    const int64_t start = packed.window(w).second;
    packed.next(tok5, tgt5);
    const int32_t* g = tgt5.data<int32_t>();
    std::vector<int32_t> gv(g, g + 5);
    if (start == 0) EXPECT_EQ(gv, (std::vector<int32_t>{-100, 3, 4, -100, 6}));
    else EXPECT_EQ(gv, (std::vector<int32_t>{7, -100, -100, -100, 11}));
  }
  // A sample longer than T+1 is cut (and counted).
  BatchLoader short_windows({dir.file("a.bin")}, 1, 2, 5);
  EXPECT_EQ(short_windows.truncated_samples(), 2);
}

// Packed windows tag each input token with its sample's start in the window (what the model
// keeps attention and positions inside), zeros for one-sequence windows, and ignore the
// target of a sample's last token even where the mask counts the next sample's first token.
TEST(SftShards, PackedWindowsTagEachTokensSampleStart) {
  TempDir dir;
  std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<uint8_t> mask(11, 1);
  write_sft_shard(dir.file("a.bin"), ids.data(), mask.data(), 11, {0, 4, 7}, 300, 99);
  BatchLoader packed({dir.file("a.bin")}, 1, 5, 5, 0, 1, SampleWindows::Packed);
  EXPECT_TRUE(packed.packs_samples());
  OwnedTensor tok({1, 5}, DType::I32), tgt({1, 5}, DType::I32), seg({1, 5}, DType::I32);
  for (int w = 0; w < 2; ++w) {
    const int64_t start = packed.window(w).second;
    packed.next(tok, tgt, seg);
    const int32_t* g = tgt.data<int32_t>();
    const int32_t* s = seg.data<int32_t>();
    std::vector<int32_t> gv(g, g + 5), sv(s, s + 5);
    if (start == 0) {  // tokens 1..5: samples [1 2 3 4] [5 ...
      EXPECT_EQ(sv, (std::vector<int32_t>{0, 0, 0, 0, 4}));
      EXPECT_EQ(gv, (std::vector<int32_t>{2, 3, 4, -100, 6}));  // 4 does not predict 5
    } else {  // tokens 6..10: sample [5 6 7] begun before the window, then [8 9 10 11]
      EXPECT_EQ(start, 5);
      EXPECT_EQ(sv, (std::vector<int32_t>{0, 0, 2, 2, 2}));
      EXPECT_EQ(gv, (std::vector<int32_t>{7, -100, 9, 10, 11}));
    }
  }
  // One sequence per window: zeros (a padded sample; plain text).
  BatchLoader padded({dir.file("a.bin")}, 1, 3, 5);
  EXPECT_FALSE(padded.packs_samples());
  OwnedTensor tok3({1, 3}, DType::I32), tgt3({1, 3}, DType::I32), seg3({1, 3}, DType::I32);
  std::fill(seg3.data<int32_t>(), seg3.data<int32_t>() + 3, 7);
  padded.next(tok3, tgt3, seg3);
  const int32_t* s3 = seg3.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(s3, s3 + 3), (std::vector<int32_t>{0, 0, 0}));
  OwnedTensor wrong({1, 4}, DType::I32);
  EXPECT_THROW(packed.next(tok, tgt, wrong), Error);
}

TEST(SftPrepare, KindsPerRecordMasksAndBadRecords) {
  TempDir dir;
  const std::string data = dir.write(
      "sft.jsonl",
      "{\"prompt\": \"Q1 \", \"response\": \"A1\"}\n"
      "{\"instruction\": \"Do.\", \"output\": \"Done\"}\n"
      "\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n"
      "{\"text\": \"plain\"}\n");
  const auto tok = make_byte_tokenizer();
  PrepareOptions o;
  o.inputs = {data};
  o.output_dir = dir.file("out");
  o.eos_id = 0;
  o.chat_template = "chatml";
  o.progress = Progress::Never;
  const PrepareSummary s = prepare_dataset(o, *tok);
  EXPECT_TRUE(s.sft);
  EXPECT_EQ(s.documents, 4);
  EXPECT_EQ(s.kinds[static_cast<int>(RecordKind::PromptResponse)], 1);
  EXPECT_EQ(s.kinds[static_cast<int>(RecordKind::Alpaca)], 1);
  EXPECT_EQ(s.kinds[static_cast<int>(RecordKind::Messages)], 1);
  EXPECT_EQ(s.kinds[static_cast<int>(RecordKind::Text)], 1);
  const auto shard = open_token_shard(dir.file("out/train_000000.bin"));
  ASSERT_TRUE(shard->has_loss_mask());
  ASSERT_EQ(shard->sample_starts().size(), 4u);
  // The first sample: "Q1 A1" + EOS through chatml (a template was named): user/assistant turns.
  const int64_t n0 = shard->sample_starts()[1];
  std::vector<int32_t> ids(static_cast<size_t>(n0));
  std::vector<uint8_t> mask(static_cast<size_t>(n0));
  shard->read(0, n0, ids.data());
  shard->read_mask(0, n0, mask.data());
  std::string text(ids.begin(), ids.end()), kept;
  for (int64_t i = 0; i < n0; ++i)
    if (mask[static_cast<size_t>(i)]) kept += static_cast<char>(ids[static_cast<size_t>(i)]);
  EXPECT_EQ(text, "<|im_start|>user\nQ1 <|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n");
  EXPECT_EQ(kept, "A1<|im_end|>\n");
  std::ifstream manifest(dir.file("out/dataset.json"));
  const json m = json::parse(manifest);
  EXPECT_EQ(m["format"], "zerotrain-tokens-v2");
  EXPECT_EQ(m["sft"]["chat_template"], "built-in template chatml");

  // A broken record: exit 2 naming file:line; skipped and counted with BadRecords::Skip.
  const std::string bad = dir.write("bad.jsonl",
                                    "{\"prompt\": \"a\", \"response\": \"b\"}\n"
                                    "{\"prompt\": \"a\", \"response\": 7}\n"
                                    "not json\n"
                                    "{\"prompt\": \"c\", \"response\": \"d\"}\n");
  o.inputs = {bad};
  o.chat_template.clear();
  try {
    prepare_dataset(o, *tok);
    ADD_FAILURE() << "a bad record passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find(bad + ":2: field 'response' is a number"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--skip-bad-records"), std::string::npos) << e.what();
  }
  o.bad_records = BadRecords::Skip;
  const PrepareSummary skipped = prepare_dataset(o, *tok);
  EXPECT_EQ(skipped.skipped_records, 2);
  EXPECT_EQ(skipped.documents, 2);

  // Plain text data stays version 1 (EOS before each document); an SFT record among it is bad.
  const std::string plain = dir.write("plain.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"cd\"}\n");
  o.inputs = {plain};
  o.bad_records = BadRecords::Fail;
  const PrepareSummary p = prepare_dataset(o, *tok);
  EXPECT_FALSE(p.sft);
  const auto v1 = open_token_shard(dir.file("out/train_000000.bin"));
  EXPECT_FALSE(v1->has_loss_mask());
  EXPECT_EQ(v1->size(), 6);
  const std::string mixed = dir.write("mixed.jsonl", "{\"text\": \"ab\"}\n{\"prompt\": \"a\", \"response\": \"b\"}\n");
  o.inputs = {mixed};
  try {
    prepare_dataset(o, *tok);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(mixed + ":2: a prompt/response record among plain text"), std::string::npos)
        << e.what();
  }
}
