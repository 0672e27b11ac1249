// Packed SFT samples at the model level (model::Transformer's segment_starts): a training step
// on windows that pack several samples gives the loss and the gradients of every parameter
// that running each sample alone gives, summed: attention stays inside each sample and
// positions restart at each sample start (RoPE for Llama, the learned position rows for
// GPT-2), as HF's packing with position_ids. With and without activation checkpointing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/small_models.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/transformer.h"

using namespace zt;
using namespace zt::model;

namespace {

// Rows of samples: row b packs the samples of lengths[b] (summing to T).
struct PackedBatch {
  int64_t B, T;
  std::vector<std::vector<int64_t>> lengths;
  std::vector<int32_t> tokens, targets, starts;

  PackedBatch(std::vector<std::vector<int64_t>> rows, int64_t V, uint64_t seed) : lengths(std::move(rows)) {
    B = static_cast<int64_t>(lengths.size());
    T = 0;
    for (int64_t n : lengths[0]) T += n;
    tokens.resize(static_cast<size_t>(B * T));
    targets.resize(tokens.size());
    starts.resize(tokens.size());
    Philox rng(seed, 3);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng.block(i)[0] % V);
      // Some prompt-like ignored targets, as SFT data has.
      targets[i] = rng.block(i)[2] % 4 == 0 ? kIgnoreIndex : static_cast<int32_t>(rng.block(i)[1] % V);
    }
    for (int64_t b = 0; b < B; ++b) {
      int64_t at = 0;
      for (int64_t n : lengths[static_cast<size_t>(b)]) {
        for (int64_t i = 0; i < n; ++i) starts[static_cast<size_t>(b * T + at + i)] = static_cast<int32_t>(at);
        at += n;
      }
      EXPECT_EQ(at, T);
    }
  }
  Tensor view(std::vector<int32_t>& v) { return Tensor(v.data(), {B, T}, DType::I32); }
};

std::vector<std::vector<float>> grads_of(Transformer& m) {
  std::vector<std::vector<float>> out;
  for (auto& u : m.registry().units()) out.push_back(u->flat_grads().to_f32_vector());
  return out;
}

ModelConfig no_dropout(ModelConfig c) {
  c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.0f;
  return c;
}

void expect_packed_equals_separate(Family family, Checkpointing checkpointing) {
  const ModelConfig c = no_dropout(zt::testing::micro_config(family));
  ModelOptions o;
  o.checkpointing = checkpointing;
  // Samples of 1, 5, 9, 11, 14 and 23 tokens; row 1 packs them differently.
  PackedBatch batch({{9, 14, 9}, {1, 23, 5, 3}}, c.vocab_size, 17);

  Transformer packed(c, o);
  packed.init_weights(5);
  packed.zero_grads();
  const auto r = packed.forward_backward(batch.view(batch.tokens), batch.view(batch.targets), 1.0f,
                                         batch.view(batch.starts));
  const auto packed_grads = grads_of(packed);

  Transformer alone(c, o);
  alone.init_weights(5);
  alone.zero_grads();
  double loss_sum = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < batch.B; ++b) {
    int64_t at = 0;
    for (int64_t n : batch.lengths[static_cast<size_t>(b)]) {
      int32_t* tok = batch.tokens.data() + b * batch.T + at;
      int32_t* tgt = batch.targets.data() + b * batch.T + at;
      const auto one = alone.forward_backward(Tensor(tok, {1, n}, DType::I32), Tensor(tgt, {1, n}, DType::I32), 1.0f);
      loss_sum += one.loss_sum;
      count += one.count;
      at += n;
    }
  }
  EXPECT_EQ(r.count, count);
  EXPECT_NEAR(r.loss_sum, loss_sum, 1e-4 * std::fabs(loss_sum));
  const auto alone_grads = grads_of(alone);
  ASSERT_EQ(packed_grads.size(), alone_grads.size());
  for (size_t u = 0; u < packed_grads.size(); ++u) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < packed_grads[u].size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(packed_grads[u][i]) - alone_grads[u][i]));
      scale = std::max(scale, std::fabs(static_cast<double>(alone_grads[u][i])));
    }
    EXPECT_GT(scale, 0.0) << "unit " << packed.registry().unit(u).name() << " has no gradient";
    EXPECT_LT(worst / scale, 2e-5) << "unit " << packed.registry().unit(u).name();
  }
}

TEST(PackedSamples, GptTrainingStepEqualsSamplesRunAlone) {
  expect_packed_equals_separate(Family::GPT2, Checkpointing::None);
}

TEST(PackedSamples, LlamaTrainingStepEqualsSamplesRunAlone) {
  expect_packed_equals_separate(Family::Llama, Checkpointing::None);
}

TEST(PackedSamples, CheckpointedStepEqualsSamplesRunAlone) {
  expect_packed_equals_separate(Family::Llama, Checkpointing::EveryBlock);
  expect_packed_equals_separate(Family::GPT2, Checkpointing::EveryBlock);
}

// Without segment_starts the same window is one sequence: attention crosses the samples, so
// a later sample's loss differs (the check above is not vacuous), and the eval forward agrees
// with the training step on the packed loss.
TEST(PackedSamples, SegmentsChangeTheLossAndForwardAgrees) {
  const ModelConfig c = no_dropout(zt::testing::micro_config(Family::Llama));
  PackedBatch batch({{9, 14, 9}}, c.vocab_size, 23);
  Transformer m(c, ModelOptions{});
  m.init_weights(9);
  const auto packed = m.forward(batch.view(batch.tokens), batch.view(batch.targets), batch.view(batch.starts));
  const auto crossing = m.forward(batch.view(batch.tokens), batch.view(batch.targets));
  EXPECT_GT(std::fabs(packed.loss_sum - crossing.loss_sum), 1e-3);
  const auto train = m.forward_backward(batch.view(batch.tokens), batch.view(batch.targets), 1.0f,
                                        batch.view(batch.starts));
  EXPECT_NEAR(train.loss_sum, packed.loss_sum, 1e-5 * std::fabs(packed.loss_sum));
  // Bad starts are refused before any work.
  batch.starts[5] = 3;
  EXPECT_THROW(m.forward(batch.view(batch.tokens), batch.view(batch.targets), batch.view(batch.starts)), Error);
}

}  // namespace
