// SFT packing end to end: `prepare` on prompt/response JSONL -> version 2 shards -> the
// loader's packed windows (data.packing: true) with their segment starts -> the model's loss
// equals the loss of the same samples each in its own padded window (data.packing: false):
// packing changes the batching, not what any sample sees (attention, positions, targets).
#include <gtest/gtest.h>

#include <algorithm>
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
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("sft_packing_")) {}
};

model::ModelConfig tiny(model::Family family) {
  model::ModelConfig c = model::preset_config(family == model::Family::GPT2 ? "tiny-gpt2" : "tiny-llama");
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.num_kv_heads = family == model::Family::GPT2 ? 4 : 2;
  c.head_dim = 8;
  c.rope.head_dim = 8;
  c.intermediate_size = 64;
  c.vocab_size = 300;
  c.max_position_embeddings = 512;  // the three samples fit one window
  c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.0f;
  return c;
}

}  // namespace

TEST(SftPacking, PackedWindowLossEqualsPaddedPerSampleLoss) {
  TempDir dir;
  const std::string data = dir.write("sft.jsonl",
                                     "{\"prompt\": \"Q: 2+2? \", \"response\": \"A: 4\"}\n"
                                     "{\"prompt\": \"Hi \", \"response\": \"there, friend!\"}\n"
                                     "{\"instruction\": \"Say yes.\", \"output\": \"yes\"}\n");
  const auto tok = io::make_byte_tokenizer();
  io::PrepareOptions o;
  o.inputs = {data};
  o.output_dir = dir.file("data");
  o.eos_id = 0;
  o.progress = io::Progress::Never;
  ASSERT_TRUE(io::prepare_dataset(o, *tok).sft);
  const std::string shard = dir.file("data/train_000000.bin");
  const auto opened = io::open_token_shard(shard);
  const int64_t n = opened->size();
  const int64_t samples = static_cast<int64_t>(opened->sample_starts().size());
  ASSERT_EQ(samples, 3);
  int64_t longest = 0;
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t end = s + 1 < samples ? opened->sample_starts()[static_cast<size_t>(s + 1)] : n;
    longest = std::max(longest, end - opened->sample_starts()[static_cast<size_t>(s)]);
  }

  for (model::Family family : {model::Family::GPT2, model::Family::Llama}) {
    model::Transformer m(tiny(family), model::ModelOptions{});
    m.init_weights(11);
    m.set_mode(model::Mode::Eval);
    // Packed: one window of all n tokens (T + 1 = n).
    io::BatchLoader packed({shard}, 1, n - 1, 5, 0, 1, io::SampleWindows::Packed);
    ASSERT_TRUE(packed.packs_samples());
    OwnedTensor tok_p({1, n - 1}, DType::I32), tgt_p({1, n - 1}, DType::I32), seg({1, n - 1}, DType::I32);
    packed.next(tok_p, tgt_p, seg);
    const auto rp = m.forward(tok_p, tgt_p, seg);
    // Padded: each sample its own window.
    io::BatchLoader padded({shard}, samples, longest - 1, 5);
    OwnedTensor tok_s({samples, longest - 1}, DType::I32), tgt_s({samples, longest - 1}, DType::I32);
    padded.next(tok_s, tgt_s);
    const auto rs = m.forward(tok_s, tgt_s);
    EXPECT_EQ(rp.count, rs.count);
    const char* name = family == model::Family::GPT2 ? "gpt2" : "llama";
    EXPECT_NEAR(rp.loss_sum, rs.loss_sum, 1e-5 * std::fabs(rs.loss_sum)) << name;
    // Without the segments the packed window's later samples see the earlier ones.
    const auto crossing = m.forward(tok_p, tgt_p);
    EXPECT_GT(std::fabs(crossing.loss_sum - rs.loss_sum), 1e-4);
  }
}
