// model::ModelStage (model/model_stage.h): a chain of two stages, two micro-batches in
// flight (stage 0: the embedding and the first half of the blocks; stage 1: the rest, the
// final norm, head and loss; forward both micro-batches, then backward both, handing the
// hidden state and its gradient from stage to stage by copy) gives the one-stage model's
// losses and gradients bit for bit: every op runs on the same values in the same order,
// and each unit's gradients accumulate in the same micro-batch order (a tied head's
// embedding too: head, then input, micro-batch after micro-batch). Checked for GPT-2 (tied
// head, dropout) and Llama (untied, packed samples), with and without activation
// checkpointing and LoRA.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/small_models.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/model_stage.h"
#include "model/transformer.h"

using namespace zt;
using namespace zt::model;

namespace {

constexpr int64_t kB = 2, kT = 6;
constexpr int kMicroBatches = 2;

struct Batch {
  std::vector<int32_t> tokens, targets, segments;
  Tensor tok, tgt, seg;
  Batch(int64_t V, uint64_t seed, bool packed)
      : tokens(static_cast<size_t>(kB * kT)), targets(tokens.size()), segments(tokens.size()) {
    Philox rng(seed, 7);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng.block(i)[0] % V);
      targets[i] = (i % 5 == 3) ? kIgnoreIndex : static_cast<int32_t>(rng.block(i)[1] % V);
      const int32_t t = static_cast<int32_t>(i % kT);
      segments[i] = t < 2 ? 0 : 2;  // two samples per row: tokens 0-1 and 2-5
    }
    tok = Tensor(tokens.data(), {kB, kT}, DType::I32);
    tgt = Tensor(targets.data(), {kB, kT}, DType::I32);
    if (packed) seg = Tensor(segments.data(), {kB, kT}, DType::I32);
  }
};

struct ChainSetup {
  Family family;
  Checkpointing checkpointing;
  bool lora;
};

std::string name_of(const ChainSetup& s) {
  return std::string(s.family == Family::GPT2 ? "gpt2" : "llama") +
         (s.checkpointing == Checkpointing::EveryBlock ? " checkpointing" : "") + (s.lora ? " lora" : "");
}

ModelConfig config_of(const ChainSetup& s) {
  ModelConfig c = zt::testing::micro_config(s.family);
  c.num_layers = 4;
  if (s.family == Family::Llama) c.tie_word_embeddings = false;
  return c;
}

ModelOptions options_of(const ChainSetup& s) {
  ModelOptions o;
  o.checkpointing = s.checkpointing;
  if (s.lora) {
    o.lora.r = 2;
    o.lora.scaling = 2.0f;
    o.lora.dropout = 0.1f;
    o.lora.target_modules = s.family == Family::GPT2 ? std::vector<std::string>{"c_attn", "c_proj", "c_fc"}
                                                     : std::vector<std::string>{"q_proj", "v_proj", "down_proj"};
    o.lora.bias = LoraBias::All;
    o.lora.modules_to_save = {SavedModule::TokenEmbedding};
  }
  return o;
}

// Adapters' B non-zero, so the adapters change the output and take gradients.
void randomize_adapters(Transformer& m) {
  uint64_t k = 0;
  m.registry().for_each([&](Unit& u, ParamEntry& p) {
    if (u.frozen() || p.name().find("lora_B") == std::string::npos) return;
    OwnedTensor v(p.spec.shape, DType::F32);
    fill_normal(v, Philox(5, ++k), 0.0f, 0.05f);
    p.value.copy_from(v);
  });
}

std::vector<std::vector<char>> grad_bytes(Transformer& m) {
  std::vector<std::vector<char>> out;
  for (auto& u : m.registry().units()) {
    if (!u->has_grads()) continue;
    const Tensor g = u->flat_grads();
    const char* p = static_cast<const char*>(g.data());
    out.emplace_back(p, p + g.nbytes());
  }
  return out;
}

uint64_t bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

class StageChain : public ::testing::TestWithParam<ChainSetup> {};

TEST_P(StageChain, TwoStagesTwoSlotsGiveTheOneStageLossesAndGradientsBitwise) {
  const ChainSetup setup = GetParam();
  const ModelConfig c = config_of(setup);
  const bool packed = setup.family == Family::Llama;
  std::vector<Batch> batches;
  for (int m = 0; m < kMicroBatches; ++m) batches.emplace_back(c.vocab_size, 11 + m, packed);
  const float grad_scale = 0.25f;
  const uint64_t seed = 99;

  // The one-stage model: micro-batch after micro-batch.
  Transformer whole(c, options_of(setup));
  whole.init_weights(3);
  if (setup.lora) randomize_adapters(whole);
  whole.zero_grads();
  std::vector<double> expected;
  for (int m = 0; m < kMicroBatches; ++m) {
    whole.set_dropout_seed(seed, static_cast<uint64_t>(m));
    expected.push_back(whole.forward_backward(batches[m].tok, batches[m].tgt, grad_scale, batches[m].seg).loss_sum);
  }

  // The same weights as two stages over one registry.
  Transformer model(c, options_of(setup));
  model.init_weights(3);
  if (setup.lora) randomize_adapters(model);
  model.zero_grads();
  const int half = static_cast<int>(c.num_layers / 2);
  ModelStage first(model.config(), model.options(), model.registry(), {0, half, kMicroBatches});
  ModelStage last(model.config(), model.options(), model.registry(), {half, static_cast<int>(c.num_layers), 2});
  ASSERT_TRUE(first.has_embedding() && !first.has_head() && !last.has_embedding() && last.has_head());
  std::vector<OwnedTensor> hidden, grads;
  for (int m = 0; m < kMicroBatches; ++m) {
    first.set_dropout_seed(seed, static_cast<uint64_t>(m));
    StageInput in0;
    in0.tokens = batches[m].tok;
    in0.segment_starts = batches[m].seg;
    first.forward(m, in0);
    hidden.emplace_back(first.output(m).shape(), first.output(m).dtype());
    hidden.back().view().copy_from(first.output(m));
    last.set_dropout_seed(seed, static_cast<uint64_t>(m));
    StageInput in1;
    in1.hidden = hidden.back();
    in1.targets = batches[m].tgt;
    in1.segment_starts = batches[m].seg;
    last.forward(m, in1);
  }
  std::vector<double> got;
  for (int m = 0; m < kMicroBatches; ++m) {
    got.push_back(last.backward_from_loss(m, grad_scale).loss_sum);
    grads.emplace_back(last.input_grad(m).shape(), last.input_grad(m).dtype());
    grads.back().view().copy_from(last.input_grad(m));
    first.backward(m, grads.back());
  }

  for (int m = 0; m < kMicroBatches; ++m) EXPECT_EQ(bits(got[m]), bits(expected[m])) << "micro-batch " << m;
  const auto a = grad_bytes(whole), b = grad_bytes(model);
  ASSERT_EQ(a.size(), b.size());
  for (size_t u = 0; u < a.size(); ++u) EXPECT_TRUE(a[u] == b[u]) << "gradients of trainable unit #" << u;
}

INSTANTIATE_TEST_SUITE_P(Configs, StageChain,
                         ::testing::Values(ChainSetup{Family::GPT2, Checkpointing::None, false},
                                           ChainSetup{Family::GPT2, Checkpointing::EveryBlock, false},
                                           ChainSetup{Family::GPT2, Checkpointing::None, true},
                                           ChainSetup{Family::GPT2, Checkpointing::EveryBlock, true},
                                           ChainSetup{Family::Llama, Checkpointing::None, false},
                                           ChainSetup{Family::Llama, Checkpointing::EveryBlock, false},
                                           ChainSetup{Family::Llama, Checkpointing::None, true},
                                           ChainSetup{Family::Llama, Checkpointing::EveryBlock, true}),
                         [](const ::testing::TestParamInfo<ChainSetup>& i) {
                           std::string n = name_of(i.param);
                           for (char& ch : n)
                             if (ch == ' ') ch = '_';
                           return n;
                         });

}  // namespace

// A stage's slots hold micro-batches of one shape: another shape while one is in flight is
// refused (it would reallocate that micro-batch's activations), and fine once none is.
TEST(ModelStage, RefusesAnotherShapeWhileAMicroBatchIsInFlight) {
  const ChainSetup setup{Family::GPT2, Checkpointing::None, false};
  const ModelConfig c = config_of(setup);
  Transformer model(c, options_of(setup));
  model.init_weights(3);
  ModelStage stage(model.config(), model.options(), model.registry(), StageSpec::whole(c, 2));
  Batch batch(c.vocab_size, 1, false);
  StageInput in;
  in.tokens = batch.tok;
  in.targets = batch.tgt;
  stage.forward(0, in);
  std::vector<int32_t> short_tokens(kB * 3, 1);
  StageInput other;
  other.tokens = Tensor(short_tokens.data(), {kB, 3}, DType::I32);
  other.targets = other.tokens;
  EXPECT_THROW(stage.forward(1, other), Error);
  stage.backward_from_loss(0, 1.0f);
  EXPECT_NO_THROW(stage.forward(1, other));
  EXPECT_THROW(stage.backward(1, Tensor()), Error) << "the last stage starts from the loss";
  EXPECT_THROW(stage.output(1), Error) << "the last stage hands on no hidden state";
  EXPECT_THROW(stage.forward(2, in), Error) << "a slot the stage does not have";
  EXPECT_THROW(ModelStage(model.config(), model.options(), model.registry(), {1, 1, 1}), Error) << "no blocks";
}

// One stage with one slot is the Transformer: its activation buffers are activation_bytes.
TEST(ModelStage, OneSlotHoldsActivationBytes) {
  for (const Checkpointing cp : {Checkpointing::None, Checkpointing::EveryBlock}) {
    const ChainSetup setup{Family::Llama, cp, false};
    const ModelConfig c = config_of(setup);
    Transformer model(c, options_of(setup));
    model.init_weights(3);
    Batch batch(c.vocab_size, 1, false);
    model.forward_backward(batch.tok, batch.tgt, 1.0f);
    EXPECT_EQ(model.allocated_activation_bytes(), activation_bytes(c, DType::F32, cp, kB, kT));
    // Two slots: the per-micro-batch part twice, the shared scratch once.
    ModelStage two(model.config(), model.options(), model.registry(), StageSpec::whole(c, 2));
    StageInput in;
    in.tokens = batch.tok;
    in.targets = batch.tgt;
    two.forward(0, in);
    two.forward(1, in);
    EXPECT_GT(two.allocated_activation_bytes(), model.allocated_activation_bytes());
    EXPECT_LT(two.allocated_activation_bytes(), 2 * model.allocated_activation_bytes());
  }
}
