// LoRA on the model (model/lora.h, issue 20): adapter units beside a frozen base. With B = 0
// at init the model is the base model bit for bit; the base has no gradients and no
// optimizer state; training steps change the adapters only (the base stays bitwise); the
// optimizer's state is the adapters' alone; activation checkpointing gives the same
// gradients; targets resolve per family (packed fields carry one adapter per HF tensor)
// and a target the model lacks is BadInput listing the names it has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/input_error.h"
#include "core/error.h"
#include "common/small_models.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "zero/optimizer.h"

using namespace zt;
using namespace zt::model;

namespace {

ModelConfig micro(Family family) {
  ModelConfig c = zt::testing::micro_config(family);
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0f;
  return c;
}

LoraOptions lora_options(Family family, float dropout = 0.0f) {
  LoraOptions l;
  l.r = 4;
  l.scaling = 16.0f / 4.0f;
  l.dropout = dropout;
  l.target_modules = family == Family::GPT2
                         ? std::vector<std::string>{"c_attn", "c_proj", "c_fc"}
                         : std::vector<std::string>{"q_proj", "v_proj", "o_proj", "up_proj", "down_proj"};
  return l;
}

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

std::vector<char> bytes_of(const Tensor& t) {
  const char* p = static_cast<const char*>(t.data());
  return {p, p + t.nbytes()};
}

// B of every adapter set to small random values, so that the adapters change the output.
void randomize_b(Transformer& m) {
  uint64_t k = 0;
  m.registry().for_each([&](Unit& u, ParamEntry& p) {
    if (u.frozen() || p.name().find("lora_B") == std::string::npos) return;
    OwnedTensor v(p.spec.shape, DType::F32);
    fill_normal(v, Philox(5, ++k), 0.0f, 0.05f);
    p.value.copy_from(v);
  });
}

class LoraModel : public ::testing::TestWithParam<Family> {};

TEST_P(LoraModel, AtInitTheLogitsAreTheBaseModelsBitwise) {
  const ModelConfig c = micro(GetParam());
  ModelOptions base_options, lora;
  lora.lora = lora_options(GetParam());
  Transformer base(c, base_options), adapted(c, lora);
  base.init_weights(7);
  adapted.init_weights(7);
  Batch batch(2, 11, c.vocab_size, 3);
  OwnedTensor l1({2, 11, c.vocab_size}, DType::F32), l2({2, 11, c.vocab_size}, DType::F32);
  base.forward_logits(batch.tok, l1);
  adapted.forward_logits(batch.tok, l2);
  EXPECT_EQ(bytes_of(l1), bytes_of(l2));
  // A nonzero B changes them.
  randomize_b(adapted);
  adapted.forward_logits(batch.tok, l2);
  EXPECT_NE(bytes_of(l1), bytes_of(l2));
}

TEST_P(LoraModel, TheBaseIsFrozenAndOnlyAdaptersTrain) {
  const ModelConfig c = micro(GetParam());
  ModelOptions o;
  o.lora = lora_options(GetParam());
  Transformer m(c, o);
  m.init_weights(7);
  int64_t adapter_elements = 0;
  for (auto& u : m.registry().units()) {
    const bool adapter = u->name().rfind("lora.", 0) == 0;
    EXPECT_EQ(u->frozen(), !adapter) << u->name();
    EXPECT_EQ(u->has_grads(), adapter) << u->name();
    if (adapter) adapter_elements += u->padded_numel();
  }
  ASSERT_GT(adapter_elements, 0);
  std::vector<std::vector<char>> before;
  for (auto& u : m.registry().units()) before.push_back(bytes_of(u->flat_params()));

  zero::OptimizerSpec spec;
  spec.lr = 1e-2f;
  spec.weight_decay = 0.1f;
  auto opt = zero::make_optimizer(m.registry(), spec);
  // AdamW with f32 parameters: two f32 moments per adapter element, nothing for the base.
  EXPECT_EQ(opt->state_bytes(), static_cast<size_t>(adapter_elements) * 8);
  for (const auto& [name, t] : opt->state_tensors()) EXPECT_EQ(name.rfind("lora.", 0), 0u) << name;

  Batch batch(2, 9, c.vocab_size, 4);
  double first = 0, last = 0;
  for (int step = 0; step < 4; ++step) {
    m.zero_grads();
    const auto r = m.forward_backward(batch.tok, batch.tgt, 1.0f / 16.0f);
    (step == 0 ? first : last) = r.loss_sum;
    opt->step(spec.lr, 1.0f);
  }
  EXPECT_LT(last, first);
  for (size_t i = 0; i < m.registry().size(); ++i) {
    const Unit& u = m.registry().unit(i);
    if (u.frozen()) {
      EXPECT_EQ(bytes_of(u.flat_params()), before[i]) << u.name() << " changed";
    } else {
      EXPECT_NE(bytes_of(u.flat_params()), before[i]) << u.name() << " did not train";
    }
  }
}

TEST_P(LoraModel, CheckpointingGivesBitwiseEqualAdapterGradients) {
  const ModelConfig c = micro(GetParam());
  ModelOptions plain, ckpt;
  plain.lora = ckpt.lora = lora_options(GetParam(), 0.2f);
  ckpt.checkpointing = Checkpointing::EveryBlock;
  Transformer m1(c, plain), m2(c, ckpt);
  for (Transformer* m : {&m1, &m2}) {
    m->init_weights(3);
    randomize_b(*m);
    m->set_dropout_seed(9, 4);
  }
  Batch batch(2, 13, c.vocab_size, 11);
  const auto r1 = m1.forward_backward(batch.tok, batch.tgt, 0.1f);
  const auto r2 = m2.forward_backward(batch.tok, batch.tgt, 0.1f);
  EXPECT_EQ(r1.loss_sum, r2.loss_sum);
  for (size_t i = 0; i < m1.registry().size(); ++i) {
    const Unit& u1 = m1.registry().unit(i);
    if (u1.frozen()) continue;
    EXPECT_EQ(bytes_of(u1.flat_grads()), bytes_of(m2.registry().unit(i).flat_grads())) << u1.name();
  }
  // Dropout is reproducible: the same seed and step give the same loss.
  m1.zero_grads();
  EXPECT_EQ(m1.forward_backward(batch.tok, batch.tgt, 0.1f).loss_sum, r1.loss_sum);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraModel, ::testing::Values(Family::GPT2, Family::Llama),
                         [](const ::testing::TestParamInfo<Family>& i) {
                           return std::string(i.param == Family::GPT2 ? "gpt2" : "llama");
                         });

TEST(LoraTargets, PackedFieldsGetOneAdapterPerHfTensor) {
  const ModelConfig l = micro(Family::Llama);
  const auto t = adapter_targets(l, {"q_proj", "v_proj", "gate_proj"}, 1);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].module, "model.layers.1.self_attn.q_proj");
  EXPECT_EQ(t[0].field, Field::QkvWeight);
  EXPECT_EQ(t[0].row_begin, 0);
  EXPECT_EQ(t[0].rows, 32);
  EXPECT_EQ(t[1].module, "model.layers.1.self_attn.v_proj");
  EXPECT_EQ(t[1].row_begin, 32 + 16);  // after q (4 x 8) and k (2 x 8)
  EXPECT_EQ(t[1].rows, 16);
  EXPECT_EQ(t[1].field_rows, 64);
  EXPECT_EQ(t[2].field, Field::MlpInWeight);
  EXPECT_EQ(t[2].rows, 72);
  EXPECT_EQ(t[2].field_rows, 144);
  EXPECT_EQ(adapter_targets(l, {"all-linear"}, 0).size(), 7u);
  // GPT-2's Conv1D [in, out] layout: c_attn is one module over the whole packed field;
  // "c_proj" names both the attention's and the MLP's, "mlp.c_proj" only the MLP's.
  const ModelConfig g = micro(Family::GPT2);
  const auto a = adapter_targets(g, {"c_attn"}, 0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_TRUE(a[0].whole_field());
  EXPECT_EQ(a[0].rows, 96);
  EXPECT_EQ(a[0].in_features, 32);
  EXPECT_EQ(adapter_targets(g, {"c_proj"}, 0).size(), 2u);
  EXPECT_EQ(adapter_targets(g, {"mlp.c_proj"}, 0).size(), 1u);
}

TEST(LoraTargets, ATargetTheModelLacksIsBadInputListingItsNames) {
  const ModelConfig l = micro(Family::Llama);
  try {
    adapter_targets(l, {"q_proj", "query_key_value"}, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    const std::string m = e.what();
    EXPECT_NE(m.find("query_key_value"), std::string::npos) << m;
    EXPECT_NE(m.find("self_attn.q_proj"), std::string::npos) << m;
    EXPECT_NE(m.find("mlp.down_proj"), std::string::npos) << m;
  }
}

TEST(LoraTargets, AdapterUnitsCarryPeftNamesAndInit) {
  const ModelConfig l = micro(Family::Llama);
  ModelOptions o;
  o.lora = lora_options(Family::Llama);
  o.lora.target_modules = {"q_proj"};
  Transformer m(l, o);
  m.init_weights(1);
  const ParamEntry* a = m.registry().find("model.layers.0.self_attn.q_proj.lora_A.weight");
  const ParamEntry* b = m.registry().find("model.layers.0.self_attn.q_proj.lora_B.weight");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->spec.shape, (Shape{4, 32}));
  EXPECT_EQ(b->spec.shape, (Shape{32, 4}));
  // A ~ U(-1/sqrt(in), 1/sqrt(in)); B = 0.
  const float bound = 1.0f / std::sqrt(32.0f);
  float most = 0;
  for (float v : a->value.to_f32_vector()) most = std::max(most, std::fabs(v));
  EXPECT_LE(most, bound);
  EXPECT_GT(most, 0.5f * bound);
  for (float v : b->value.to_f32_vector()) EXPECT_EQ(v, 0.0f);
}

}  // namespace

namespace {

// Records each unit's hook events in order ("embed+" before_forward, "embed-" after_forward,
// "embed<" before_backward, "embed>" after_backward).
struct HookLog : UnitHooks {
  std::vector<std::string> events;
  void before_forward(Unit& u) override { events.push_back(u.name() + "+"); }
  void after_forward(Unit& u) override { events.push_back(u.name() + "-"); }
  void before_backward(Unit& u) override { events.push_back(u.name() + "<"); }
  void after_backward(Unit& u) override { events.push_back(u.name() + ">"); }
  size_t at(const std::string& e) const {
    return static_cast<size_t>(std::find(events.begin(), events.end(), e) - events.begin());
  }
};

}  // namespace

// A tied head's weight is the embedding unit's token table, so that unit stays in place
// (ZeRO-3: gathered) from the input through the head. With LoRA's trained copy of the head
// (modules_to_save), the head reads the copy: the embedding unit is released right after the
// input and taken again only for the input's backward, as an untied model's is.
TEST(LoraHooks, ATiedHeadsCopyReleasesTheEmbeddingAfterTheInput) {
  ModelConfig c = micro(Family::GPT2);
  ASSERT_TRUE(c.tie_word_embeddings);
  for (const bool copy : {false, true}) {
    SCOPED_TRACE(copy ? "head copy" : "tied head");
    ModelOptions o;
    o.lora = lora_options(Family::GPT2);
    if (copy) o.lora.modules_to_save = {SavedModule::LmHead};
    Transformer m(c, o);
    m.init_weights(7);
    HookLog log;
    m.set_hooks(&log);
    Batch batch(2, 9, c.vocab_size, 4);
    m.forward_backward(batch.tok, batch.tgt, 1.0f);
    const size_t end = log.events.size();
    if (copy) {
      EXPECT_LT(log.at("embed-"), log.at("block.0+"));  // released before the blocks run
      EXPECT_GT(log.at("embed<"), log.at("block.0>"));  // taken again after them, for the input's backward
      EXPECT_LT(log.at(std::string(kLoraLmHeadUnit) + "<"), end);  // the head reads its copy
    } else {
      // kept from the input through the head into the backward (no release in between)
      EXPECT_EQ(log.at("embed-"), end);
      EXPECT_LT(log.at("embed<"), log.at("block.1<"));
    }
    for (const char* e : {"embed+", "embed<", "embed>"})
      EXPECT_EQ(std::count(log.events.begin(), log.events.end(), e), 1) << e;
    EXPECT_LT(log.at("embed<"), log.at("embed>"));
  }
}
