// The order in which the model calls its UnitHooks (model/unit_scope.h): the ZeRO engine
// gathers, releases and reduces in these calls, so the order is part of the contract. The
// expectations below were recorded from the hand-paired calls the model made before the
// calls became UnitScopes, for a model without and with LoRA (adapters, trained biases,
// trained copies of the head and the token embedding, a tied and an untied head), for a
// training pass (forward_backward, with and without activation checkpointing), an
// evaluation pass (forward) and forward_logits.
//
// Events: "<unit>+" before_forward, "<unit>-" after_forward, "<unit><" before_backward,
// "<unit>>" after_backward.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/small_models.h"
#include "core/rng.h"
#include "model/transformer.h"

using namespace zt;
using namespace zt::model;

namespace {

struct HookLog : UnitHooks {
  std::string events;
  void add(const Unit& u, const char* e) {
    if (!events.empty()) events += ' ';
    events += u.name() + e;
  }
  void before_forward(Unit& u) override { add(u, "+"); }
  void after_forward(Unit& u) override { add(u, "-"); }
  void before_backward(Unit& u) override { add(u, "<"); }
  void after_backward(Unit& u) override { add(u, ">"); }
};

struct Case {
  const char* name;
  Family family;
  bool lora;
  LoraBias bias;
  std::vector<SavedModule> saved;
  bool untied = false;  // the head its own matrix
};

ModelOptions options_for(const Case& k, Checkpointing checkpointing) {
  ModelOptions o;
  o.checkpointing = checkpointing;
  if (!k.lora) return o;
  o.lora.r = 2;
  o.lora.scaling = 2.0f;
  o.lora.target_modules = k.family == Family::GPT2 ? std::vector<std::string>{"c_attn", "c_proj", "c_fc"}
                                                   : std::vector<std::string>{"q_proj", "v_proj", "down_proj"};
  o.lora.bias = k.bias;
  o.lora.modules_to_save = k.saved;
  return o;
}

// The three passes' events, one line each.
std::vector<std::string> record(const Case& k, Checkpointing checkpointing) {
  ModelConfig c = zt::testing::micro_config(k.family);
  if (k.untied) c.tie_word_embeddings = false;
  Transformer m(c, options_for(k, checkpointing));
  m.init_weights(3);
  const int64_t B = 1, T = 4;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((7 * i + 1) % 300);
    targets[i] = static_cast<int32_t>((5 * i + 2) % 300);
  }
  const Tensor tok(tokens.data(), {B, T}, DType::I32), tgt(targets.data(), {B, T}, DType::I32);
  std::vector<std::string> out;
  HookLog log;
  m.set_hooks(&log);
  m.forward_backward(tok, tgt, 1.0f);
  out.push_back(log.events);
  log.events.clear();
  m.forward(tok, tgt);
  out.push_back(log.events);
  log.events.clear();
  OwnedTensor logits({B, T, c.vocab_size}, DType::F32);
  m.forward_logits(tok, logits);
  out.push_back(log.events);
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> k = {
      {"gpt2", Family::GPT2, false, LoraBias::None, {}},
      {"llama", Family::Llama, false, LoraBias::None, {}},
      {"gpt2_lora", Family::GPT2, true, LoraBias::None, {}},
      {"gpt2_lora_bias_all_head_copy", Family::GPT2, true, LoraBias::All, {SavedModule::LmHead}},
      {"gpt2_lora_embedding_copy", Family::GPT2, true, LoraBias::LoraOnly, {SavedModule::TokenEmbedding}},
      {"llama_lora", Family::Llama, true, LoraBias::None, {}},
      {"llama_lora_both_copies",
       Family::Llama,
       true,
       LoraBias::None,
       {SavedModule::TokenEmbedding, SavedModule::LmHead}},
      {"llama_untied", Family::Llama, false, LoraBias::None, {}, true},
      {"llama_untied_lora_bias_all_embedding_copy",
       Family::Llama,
       true,
       LoraBias::All,
       {SavedModule::TokenEmbedding},
       true},
      {"llama_untied_lora_head_copy", Family::Llama, true, LoraBias::None, {SavedModule::LmHead}, true},
  };
  return k;
}

// Recorded from the code before UnitScope (see the file comment): case -> three passes.
const std::vector<std::vector<std::string>>& expected() {
  static const std::vector<std::vector<std::string>> e = {
#include "unit_scope_test_expected.inc"
  };
  return e;
}

// Prints a case's actual sequences in the form of the expectation file.
std::string as_literal(const std::vector<std::string>& passes) {
  std::string s = "    {\n";
  for (const std::string& p : passes) s += "        \"" + p + "\",\n";
  return s + "    },\n";
}

}  // namespace

TEST(UnitScope, TheModelCallsItsHooksInTheRecordedOrder) {
  const auto& k = cases();
  const auto& e = expected();
  std::string all;
  for (const Checkpointing cp : {Checkpointing::None, Checkpointing::EveryBlock}) {
    for (size_t i = 0; i < k.size(); ++i) {
      SCOPED_TRACE(std::string(k[i].name) + (cp == Checkpointing::None ? "" : " checkpointing"));
      const std::vector<std::string> got = record(k[i], cp);
      if (cp == Checkpointing::None) all += as_literal(got);
      if (cp == Checkpointing::EveryBlock) {
        // Checkpointing recomputes inside the backward: the same hook calls.
        EXPECT_EQ(got, record(k[i], Checkpointing::None));
        continue;
      }
      if (i < e.size())
        EXPECT_EQ(got, e[i]);
      else
        ADD_FAILURE() << "no expectation recorded";
    }
  }
  if (::testing::Test::HasFailure()) std::printf("actual sequences:\n%s", all.c_str());
}
