// Model layer: registry layout, parameter counts of the real shapes, init
// reproducibility, activation checkpointing (bitwise-equal gradients), dropout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "common/small_models.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "model/weights.h"

using namespace zt;
using namespace zt::model;

namespace {

ModelConfig micro(Family family) { return zt::testing::micro_config(family); }

struct Batch {
  std::vector<int32_t> tokens, targets;
  Tensor tok, tgt;
  Batch(int64_t B, int64_t T, int64_t V, uint64_t seed) : tokens(static_cast<size_t>(B * T)), targets(tokens.size()) {
    Philox rng(seed, 7);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng.block(i)[0] % V);
      targets[i] = (i % 5 == 3) ? kIgnoreIndex : static_cast<int32_t>(rng.block(i)[1] % V);
    }
    tok = Tensor(tokens.data(), {B, T}, DType::I32);
    tgt = Tensor(targets.data(), {B, T}, DType::I32);
  }
};

std::vector<std::vector<char>> grad_bytes(Transformer& m) {
  std::vector<std::vector<char>> out;
  for (auto& u : m.registry().units()) {
    const Tensor g = u->flat_grads();
    const char* p = static_cast<const char*>(g.data());
    out.emplace_back(p, p + g.nbytes());
  }
  return out;
}

}  // namespace

TEST(Registry, ParameterCountsMatchHF) {
  // Counts as HF reports them (model.num_parameters()).
  EXPECT_EQ(preset_config("gpt2").num_parameters(), 124439808);
  EXPECT_EQ(preset_config("gpt2-medium").num_parameters(), 354823168);
  EXPECT_EQ(preset_config("gpt2-large").num_parameters(), 774030080);
  EXPECT_EQ(preset_config("gpt2-xl").num_parameters(), 1557611200);
  EXPECT_EQ(preset_config("llama-3.2-1b").num_parameters(), 1235814400);
  EXPECT_EQ(preset_config("llama-2-7b").num_parameters(), 6738415616);  // Llama-2-7b-hf's count
}

// MFU's FLOP count: 6 per weight a token meets (the head's GEMM counted, the embedding
// lookup not) + attention's 6 L T (Hq D); a frozen base (LoRA) drops the weight gradients'
// 2 per weight and keeps attention's backward. Llama-3.2-1B at T = 2048: 1,235,814,400
// parameters of which 262,668,288 the tied embedding/head, 16 x 2048 x 2048 attention width.
TEST(Registry, FlopsPerTokenCountsSixOrFourPerWeightPlusAttention) {
  const ModelConfig c = preset_config("llama-3.2-1b");
  const double weights = 1235814400.0, attention = 6.0 * 16 * 2048 * 2048;
  EXPECT_DOUBLE_EQ(c.flops_per_token(2048), 6.0 * weights + attention);
  EXPECT_DOUBLE_EQ(c.flops_per_token(2048, BaseWeights::Frozen), 4.0 * weights + attention);
  // Untied (Llama-2-7B): the head is its own 32000 x 4096 parameters, the token table not a
  // GEMM: 6,738,415,616 - 131,072,000 weights; T = 4096, 32 layers of width 4096.
  const ModelConfig u = preset_config("llama-2-7b");
  EXPECT_DOUBLE_EQ(u.flops_per_token(4096), 6.0 * (6738415616.0 - 131072000.0) + 6.0 * 32 * 4096 * 4096);
}

TEST(Registry, UnitsArePaddedAndViewsAreDisjoint) {
  for (Family f : {Family::GPT2, Family::Llama}) {
    ModelOptions o;
    o.shard_count = 7;
    Transformer m(micro(f), o);
    auto& reg = m.registry();
    ASSERT_EQ(reg.size(), static_cast<size_t>(m.config().num_layers + 2));
    int64_t counted = 0;
    for (auto& u : reg.units()) {
      EXPECT_EQ(u->padded_numel() % 7, 0) << u->name();
      int64_t end = 0;
      for (auto& p : u->params()) {
        EXPECT_GE(p.offset, end) << p.name();
        end = p.offset + p.numel();
        EXPECT_EQ(p.value.numel(), p.numel());
        EXPECT_EQ(p.grad.numel(), p.numel());
        counted += shape_numel(p.spec.hf_shape);
      }
      EXPECT_LE(end, u->padded_numel());
    }
    EXPECT_EQ(counted, m.config().num_parameters());
    const ParamEntry* wte = reg.find(f == Family::GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
    ASSERT_NE(wte, nullptr);
    EXPECT_EQ(wte->spec.shape[0], 384);
    EXPECT_EQ(wte->spec.hf_shape[0], 300);
  }
}

// The weights table: every parameter belongs to a field, the model binds fields (packed
// HF tensors as one view), and the table records the tensor-parallel split.
TEST(WeightsTable, FieldsBindPackedViewsAndRecordTheSplit) {
  for (Family f : {Family::GPT2, Family::Llama}) {
    ModelConfig c = micro(f);
    c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
    c.tie_word_embeddings = false;
    Transformer m(c, ModelOptions{});
    const Unit& block = block_unit(m.registry(), 1);
    const UnitWeights w(block, Storage::Values), g(block, Storage::Grads);
    const int64_t C = c.hidden_size;
    const bool in_out = f == Family::GPT2;  // Conv1D weights stay [in, out], as in HF files
    EXPECT_EQ(w[Field::QkvWeight].shape(), in_out ? Shape({C, c.qkv_width()}) : Shape({c.qkv_width(), C}));
    EXPECT_EQ(w[Field::MlpInWeight].shape(), in_out ? Shape({C, c.mlp_in_width()}) : Shape({c.mlp_in_width(), C}));
    EXPECT_EQ(w[Field::QkvBias].shape(), Shape({c.qkv_width()}));
    EXPECT_EQ(w[Field::Norm1Bias].defined() && w[Field::Norm1Bias].data() != nullptr, c.norm_has_bias());
    EXPECT_EQ(w.layout(Field::QkvWeight), in_out ? WeightLayout::InOut : WeightLayout::OutIn);
    EXPECT_EQ(w[Field::QkvWeight].data(), block.params()[c.norm_has_bias() ? 2 : 1].value.data());
    EXPECT_EQ(g[Field::QkvWeight].data(), block.params()[c.norm_has_bias() ? 2 : 1].grad.data());
    for (const ParamEntry& p : block.params()) {
      if (p.spec.field == Field::QkvWeight || p.spec.field == Field::MlpInWeight) {
        EXPECT_EQ(p.spec.tp_split, TpSplit::Output) << p.name();
      }
      if (p.spec.field == Field::AttnOutWeight || p.spec.field == Field::MlpOutWeight) {
        EXPECT_EQ(p.spec.tp_split, TpSplit::Input) << p.name();
      }
      if (p.spec.decay == WeightDecay::Skip) {
        EXPECT_EQ(p.spec.shape.size(), 1u) << p.name();
      }
    }
    const UnitWeights head(head_unit(m.registry()), Storage::Values);
    EXPECT_EQ(head[Field::LmHead].shape(), Shape({c.padded_vocab_size(), C}));
    EXPECT_EQ(head_unit(m.registry()).params().back().spec.tp_split, TpSplit::Vocab);
  }
}

// Architecture flags, not the family, pick the model: GPT-2's names with RMSNorm, a gated
// MLP (c_fc holds [gate | up]) and rotary positions (no wpe) train; a flag whose tensor the
// family's HF names lack is refused with the field's name.
TEST(WeightsTable, FlagsPickTheArchitectureAndMissingNamesAreUnsupported) {
  ModelConfig c = micro(Family::GPT2);
  c.norm = NormKind::RmsNorm;
  c.mlp = MlpKind::GatedSilu;
  c.position = PositionKind::Rotary;
  Transformer m(c, ModelOptions{});
  EXPECT_EQ(m.registry().find("transformer.wpe.weight"), nullptr);
  EXPECT_EQ(m.registry().find("transformer.h.0.ln_1.bias"), nullptr);
  EXPECT_EQ(m.registry().find("transformer.h.0.mlp.c_fc.weight")->spec.shape,
            Shape({c.hidden_size, 2 * c.intermediate_size}));
  int64_t counted = 0;
  m.registry().for_each([&](Unit&, ParamEntry& p) { counted += shape_numel(p.spec.hf_shape); });
  EXPECT_EQ(counted, c.num_parameters());
  m.init_weights(3);
  Batch b(2, 8, c.vocab_size, 1);
  const auto r = m.forward_backward(b.tok, b.tgt, 1.0f);
  EXPECT_TRUE(std::isfinite(r.loss_sum));

  ModelConfig l = micro(Family::Llama);
  l.norm = NormKind::LayerNorm;  // Llama files have no norm biases
  try {
    Transformer bad(l, ModelOptions{});
    ADD_FAILURE() << "a Llama model with LayerNorm biases was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("norm1 bias"), std::string::npos) << e.what();
  }
}

TEST(Model, InitIsReproducibleAndIndependentOfSharding) {
  ModelOptions a, b;
  b.shard_count = 5;
  Transformer m1(micro(Family::Llama), a), m2(micro(Family::Llama), b);
  m1.init_weights(42);
  m2.init_weights(42);
  m1.registry().for_each([&](Unit&, ParamEntry& p) {
    const ParamEntry* q = m2.registry().find(p.name());
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(std::memcmp(p.value.data(), q->value.data(), p.value.nbytes()), 0) << p.name();
  });
  // Padding rows of the embedding are zero; norm gains are one.
  const ParamEntry* wte = m1.registry().find("model.embed_tokens.weight");
  EXPECT_EQ(wte->value.get_f32(300 * 32), 0.0f);
  EXPECT_EQ(m1.registry().find("model.norm.weight")->value.get_f32(0), 1.0f);
}

class CheckpointingTest : public ::testing::TestWithParam<std::tuple<Family, float>> {};

TEST_P(CheckpointingTest, GradientsAreBitwiseEqual) {
  const auto [family, dropout] = GetParam();
  ModelConfig c = micro(family);
  c.resid_pdrop = c.embd_pdrop = dropout;
  ModelOptions plain, ckpt;
  ckpt.checkpointing = Checkpointing::EveryBlock;
  Transformer m1(c, plain), m2(c, ckpt);
  m1.init_weights(3);
  m2.init_weights(3);
  m1.set_dropout_seed(9, 4);
  m2.set_dropout_seed(9, 4);
  Batch batch(2, 13, c.vocab_size, 11);
  const float scale = 1.0f / static_cast<float>(count_targets(batch.tgt));
  const auto r1 = m1.forward_backward(batch.tok, batch.tgt, scale);
  const auto r2 = m2.forward_backward(batch.tok, batch.tgt, scale);
  EXPECT_EQ(r1.loss_sum, r2.loss_sum);
  EXPECT_EQ(r1.count, r2.count);
  EXPECT_GT(r1.count, 0);
  const auto g1 = grad_bytes(m1), g2 = grad_bytes(m2);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_TRUE(g1[i] == g2[i]) << "unit " << i;
}

INSTANTIATE_TEST_SUITE_P(Families, CheckpointingTest,
                         ::testing::Combine(::testing::Values(Family::GPT2, Family::Llama),
                                            ::testing::Values(0.0f, 0.2f)));

TEST(Model, GradientsAccumulateAcrossCalls) {
  Transformer m(micro(Family::GPT2), ModelOptions{});
  m.init_weights(1);
  Batch batch(2, 9, 300, 5);
  m.forward_backward(batch.tok, batch.tgt, 0.5f);
  const auto once = m.registry().unit(1).flat_grads().to_f32_vector();
  m.forward_backward(batch.tok, batch.tgt, 0.5f);
  const auto twice = m.registry().unit(1).flat_grads().to_f32_vector();
  for (size_t i = 0; i < once.size(); ++i) ASSERT_NEAR(twice[i], 2 * once[i], 1e-6f + 1e-5f * std::fabs(once[i]));
  m.zero_grads();
  for (float g : m.registry().unit(1).flat_grads().to_f32_vector()) ASSERT_EQ(g, 0.0f);
}

TEST(Model, EvalLossMatchesTrainLossWithoutDropoutAndLossFallsWithTraining) {
  ModelConfig c = micro(Family::Llama);
  Transformer m(c, ModelOptions{});
  m.init_weights(2);
  Batch batch(2, 16, c.vocab_size, 8);
  const auto eval = m.forward(batch.tok, batch.tgt);
  const auto train = m.forward_backward(batch.tok, batch.tgt, 1.0f);
  EXPECT_DOUBLE_EQ(eval.loss_sum, train.loss_sum);
  // Initial loss is close to log(V) for small init.
  EXPECT_NEAR(eval.loss_sum / static_cast<double>(eval.count), std::log(300.0), 0.2);
}

TEST(Model, RejectsSequencesLongerThanTheContext) {
  ModelConfig c = micro(Family::GPT2);
  Transformer m(c, ModelOptions{});
  Batch batch(1, 65, c.vocab_size, 1);
  EXPECT_THROW(m.forward(batch.tok, batch.tgt), zt::Error);
}
