// Supervised fine-tuning end to end, up to the loss: `prepare` on prompt/response JSONL ->
// version 2 shards -> the loader's padded per-sample windows -> the model's loss equals the
// hand-computed masked loss: the mean of the per-token losses over the response tokens
// (and EOS) only, as HF's CrossEntropyLoss(ignore_index=-100) over labels with the prompt
// set to -100. Each per-token loss is the model's loss with only that target kept.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "core/tensor.h"
#include "io/prepare.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"
#include "model/transformer.h"

using namespace zt;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("sft_loss_")) {}
};

model::ModelConfig tiny() {
  model::ModelConfig c = model::preset_config("tiny-gpt2");
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 8;
  c.intermediate_size = 128;
  c.vocab_size = 300;
  c.max_position_embeddings = 64;
  return c;
}

}  // namespace

TEST(SftMaskedLoss, PreparedSamplesGiveTheMaskedMeanOverResponseTokens) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> records = {{"Q: 2+2?\n", "A: 4"}, {"Hi ", "there!"}};
  std::string jsonl;
  for (const auto& [p, r] : records) jsonl += "{\"prompt\": \"" + p.substr(0, p.size() - (p.back() == '\n')) +
                                               (p.back() == '\n' ? "\\n" : "") + "\", \"response\": \"" + r + "\"}\n";
  const std::string data = dir.write("sft.jsonl", jsonl);
  const auto tok = io::make_byte_tokenizer();
  io::PrepareOptions o;
  o.inputs = {data};
  o.output_dir = dir.file("data");
  o.eos_id = 0;
  o.progress = io::Progress::Never;
  ASSERT_TRUE(io::prepare_dataset(o, *tok).sft);

  const int64_t B = 2, T = 24;
  io::BatchLoader loader({dir.file("data/train_000000.bin")}, B, T, 3);
  ASSERT_EQ(loader.windows_per_epoch(), 2);
  std::vector<int64_t> starts = {loader.window(0).second, loader.window(1).second};
  OwnedTensor tokens({B, T}, DType::I32), targets({B, T}, DType::I32);
  loader.next(tokens, targets);

  // The hand-made labels: the sample's ids (prompt + response bytes, then EOS), shifted,
  // -100 on the prompt and on the padding.
  std::vector<int32_t> expected(static_cast<size_t>(B * T), -100);
  int64_t counted = 0;
  for (int64_t b = 0; b < B; ++b) {
    const size_t k = starts[static_cast<size_t>(b)] == 0 ? 0 : 1;  // the shard holds the records in order
    const std::string text = records[k].first + records[k].second;
    std::vector<int32_t> ids(text.begin(), text.end());
    ids.push_back(0);
    const int64_t prompt = static_cast<int64_t>(records[k].first.size());
    for (int64_t t = 0; t + 1 < static_cast<int64_t>(ids.size()) && t < T; ++t) {
      EXPECT_EQ(tokens.data<int32_t>()[b * T + t], ids[static_cast<size_t>(t)]);
      if (t + 1 >= prompt) expected[static_cast<size_t>(b * T + t)] = ids[static_cast<size_t>(t + 1)], ++counted;
    }
  }
  const std::vector<int32_t> got(targets.data<int32_t>(), targets.data<int32_t>() + B * T);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(counted, static_cast<int64_t>(records[0].second.size() + records[1].second.size() + 2));

  model::Transformer m(tiny(), model::ModelOptions{});
  m.init_weights(5);
  m.set_mode(model::Mode::Eval);
  const auto r = m.forward(tokens, targets);
  ASSERT_EQ(r.count, counted);
  double sum = 0;
  std::vector<int32_t> one(static_cast<size_t>(B * T));
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == -100) continue;
    std::fill(one.begin(), one.end(), -100);
    one[i] = expected[i];
    const auto single = m.forward(tokens, Tensor(one.data(), {B, T}, DType::I32));
    ASSERT_EQ(single.count, 1);
    sum += single.loss_sum;
  }
  const double masked_mean = sum / static_cast<double>(counted);
  EXPECT_NEAR(r.loss_sum / static_cast<double>(r.count), masked_mean, 1e-5 * masked_mean);
  // Not the unmasked loss: the prompt tokens would change it.
  std::vector<int32_t> all(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) all[static_cast<size_t>(i)] = i % T + 1 < T ? tokens.data<int32_t>()[i + 1] : -100;
  const auto unmasked = m.forward(tokens, Tensor(all.data(), {B, T}, DType::I32));
  EXPECT_GT(std::fabs(unmasked.loss_sum / static_cast<double>(unmasked.count) - masked_mean), 1e-4);
}
