// `zerotrain eval` on supervised fine-tuning data (train/evaluate.h): SFT records and SFT
// shards become one document per sample with its loss mask, and the loss counts the
// response tokens only, as training does.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <vector>

#include "common/small_models.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "io/tokenizer.h"
#include "io/token_dataset.h"
#include "model/transformer.h"
#include "train/evaluate.h"

using namespace zt;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("eval_sft_")) {}
};

model::ModelConfig eval_model() {
  model::ModelConfig c = zt::testing::micro_config(model::Family::Llama);
  c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.0f;
  return c;
}

}  // namespace

// The masked score is the model's loss on exactly the unmasked targets: one forward over
// each sample with -100 where the mask is 0, summed.
TEST(EvaluateSft, LossCountsOnlyMaskedTargets) {
  model::Transformer m(eval_model(), model::ModelOptions{});
  m.init_weights(4);
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 3, 4, 5, 6}, {7, 8, 9}, {10}};
  const std::vector<std::vector<uint8_t>> masks = {{0, 0, 1, 1, 0, 1}, {0, 1, 1}, {1}};
  const train::EvalResult r = train::evaluate(m, docs, train::EvalOptions{}, &masks);
  double expected = 0;
  int64_t count = 0;
  for (size_t d = 0; d < 2; ++d) {
    const int64_t n = static_cast<int64_t>(docs[d].size()) - 1;
    std::vector<int32_t> tok(docs[d].begin(), docs[d].end() - 1), tgt(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      tgt[static_cast<size_t>(i)] = masks[d][static_cast<size_t>(i + 1)] ? docs[d][static_cast<size_t>(i + 1)] : -100;
    const auto f = m.forward(Tensor(tok.data(), {1, n}, DType::I32), Tensor(tgt.data(), {1, n}, DType::I32));
    expected += f.loss_sum;
    count += f.count;
  }
  EXPECT_EQ(r.tokens, 5);
  EXPECT_EQ(r.tokens, count);
  EXPECT_NEAR(r.loss_sum, expected, 1e-5 * std::fabs(expected));
  EXPECT_EQ(r.documents, 2);
  // All-ones masks: the unmasked score.
  const std::vector<std::vector<uint8_t>> ones = {std::vector<uint8_t>(6, 1), std::vector<uint8_t>(3, 1), {1}};
  const train::EvalResult all = train::evaluate(m, docs, train::EvalOptions{}, &ones);
  const train::EvalResult plain = train::evaluate(m, docs, train::EvalOptions{});
  EXPECT_EQ(all.tokens, plain.tokens);
  EXPECT_DOUBLE_EQ(all.loss_sum, plain.loss_sum);
  // No response token at all, or masks that do not fit, are errors.
  const std::vector<std::vector<uint8_t>> zeros = {std::vector<uint8_t>(6, 0), std::vector<uint8_t>(3, 0), {0}};
  EXPECT_THROW(train::evaluate(m, docs, train::EvalOptions{}, &zeros), Error);
  const std::vector<std::vector<uint8_t>> short_masks = {{1}, {1}, {1}};
  EXPECT_THROW(train::evaluate(m, docs, train::EvalOptions{}, &short_masks), Error);
}

// SFT shards: one document per sample, with its mask; plain shards give none.
TEST(EvaluateSft, ShardSamplesComeWithTheirMasks) {
  TempDir dir;
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint8_t> mask = {0, 1, 1, 0, 0, 1, 1};
  io::write_sft_shard(dir.file("train_000000.bin"), ids.data(), mask.data(), 7, {0, 3}, 300, 0);
  const train::SftDocuments d = train::read_sft_shard_documents(dir.file("train_000000.bin"));
  ASSERT_EQ(d.ids.size(), 2u);
  EXPECT_EQ(d.ids[0], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d.masks[0], (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(d.ids[1], (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(d.masks[1], (std::vector<uint8_t>{0, 0, 1, 1}));
  io::write_token_shard(dir.file("plain.bin"), ids.data(), 7, 300, 0);
  EXPECT_TRUE(train::read_sft_shard_documents(dir.file("plain.bin")).empty());
}

// SFT records are rendered and masked as prepare does: prompt tokens 0, response tokens
// (and the EOS after them) 1; a file of plain text records is not SFT data.
TEST(EvaluateSft, RecordsAreMaskedAsPrepareMasksThem) {
  TempDir dir;
  const auto tok = io::make_byte_tokenizer();
  const std::string path = dir.write("sft.jsonl",
                                     "{\"prompt\": \"Q: 1+1? \", \"response\": \"2\"}\n"
                                     "{\"prompt\": \"Hi \", \"completion\": \"there\"}\n");
  const train::SftDocuments d = train::read_sft_records(path, *tok, train::SftRecordOptions{});
  ASSERT_EQ(d.ids.size(), 2u);
  int64_t counted = 0;
  for (size_t s = 0; s < d.ids.size(); ++s) {
    ASSERT_EQ(d.ids[s].size(), d.masks[s].size());
    EXPECT_EQ(d.masks[s].front(), 0) << "the prompt is not a target";
    EXPECT_EQ(d.masks[s].back(), 1) << "the response (its EOS) is";
    for (uint8_t b : d.masks[s]) counted += b;
  }
  EXPECT_EQ(counted, 1 + 5);  // "2" and "there" (the byte tokenizer has no EOS to append)
  const std::string text = dir.write("text.jsonl", "{\"text\": \"plain\"}\n");
  EXPECT_TRUE(train::read_sft_records(text, *tok, train::SftRecordOptions{}).empty());
  const std::string bad = dir.write("bad.jsonl", "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": 3}\n");
  EXPECT_THROW(train::read_sft_records(bad, *tok, train::SftRecordOptions{}), Error);
  train::SftRecordOptions skip;
  skip.skip_bad_records = true;
  EXPECT_EQ(train::read_sft_records(bad, *tok, skip).ids.size(), 1u);
}
