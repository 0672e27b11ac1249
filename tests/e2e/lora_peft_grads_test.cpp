// LoRA gradients against PEFT + PyTorch on the same weights (issue 20 item 5): the adapters of
// tests/data/peft_grads (PEFT 0.12's files, tools/make_peft_grad_fixtures.py) loaded with
// --adapter onto their HF-made tiny base, one forward/backward of HF's causal LM loss (the
// mean over the shifted tokens) over the reference's ids through the Accelerator API, and
// every adapter's dA and dB (and each trained copy's gradient) compared with PEFT's float64
// gradients (reference.safetensors: grad.<adapter key>), within 1e-4 of each tensor's
// largest gradient; the loss too.
// GPT-2 (Conv1D, fan_in_fan_out; c_attn, both c_proj, c_fc), Llama-3 (the seven, q/k/v and
// gate/up packed) and Qwen2 (the seven, q/k/v biases, use_rslora); modules_to_save's trained
// copies too: GPT-2's tied pair untied by a copy of wte (the head reads the base's) or of
// lm_head (the input reads the base's), and Llama-3's untied embed_tokens and lm_head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/fixture_tokenizer.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/safetensors.h"
#include "model/lora_adapter.h"
#include "model/lora.h"
#include "model/registry.h"
#include "model/transformer.h"
#include "zerotrain/accelerator.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/";

struct Case {
  const char* name;    // tests/data/peft_grads/<name>
  const char* family;  // tests/data/hf/<family>
  size_t adapters;     // lora_A + lora_B tensors
};

class LoraPeftGrads : public ::testing::TestWithParam<Case> {};

TEST_P(LoraPeftGrads, GradientsEqualPefts) {
  const Case c = GetParam();
  const std::string adapter = kData + "peft_grads/" + c.name;
  const io::SafetensorsReader ref(adapter + "/reference.safetensors");
  const std::vector<float> ids = ref.tensor("input_ids").to_f32_vector();
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_GT(T, 2);

  const fs::path dir = zt::testing::fresh_test_dir("lora_peft_grads_", c.name);
  zt::testing::write_fixture_tokenizer(dir / "tok");  // the fixtures have 320 rows; the ids here are bytes
  Accelerator acc(zt::testing::small_run(
      dir,
      {"--model.preset", "", "--model.path", kData + "hf/" + c.family, "--model.tokenizer",
       (dir / "tok" / "tok.json").string(), "--adapter", adapter, "--device", "cpu", "--per_device_train_batch_size",
       "1", "--gradient_accumulation_steps", "1", "--data.seq_len", std::to_string(T)}));

  std::vector<int32_t> tokens(ids.begin(), ids.end()), targets(static_cast<size_t>(T), -100);
  for (int64_t t = 0; t + 1 < T; ++t) targets[static_cast<size_t>(t)] = tokens[static_cast<size_t>(t + 1)];
  Accelerator::Batch batch;
  batch.tokens = tokens.data();
  batch.targets = targets.data();
  batch.batch_size = 1;
  batch.seq_len = T;
  const double loss = acc.backward(batch);
  const float want_loss = ref.tensor("loss").to_f32_vector().at(0);
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::fabs(want_loss)) << c.name;

  // The adapter units "lora.<l>" hold "<module>.lora_A.weight" / ".lora_B.weight": PEFT's
  // keys without "base_model.model." (model/lora.h).
  std::set<std::string> seen;
  for (const auto& unit : acc.model().registry().units()) {
    if (!model::is_lora_unit(*unit)) continue;
    ASSERT_TRUE(unit->has_grads()) << unit->name();
    for (const model::ParamEntry& p : unit->params()) {
      const std::string key = std::string(model::kPeftKeyPrefix) + p.name();
      ASSERT_TRUE(ref.contains("grad." + key)) << key << " is not among PEFT's adapter tensors";
      const std::vector<float> want = ref.tensor("grad." + key).to_f32_vector();
      // A trained copy of an embedding-sized module: the file's rows (no vocabulary padding).
      const std::vector<float> have = p.grad.narrow(0, 0, p.spec.hf_shape[0]).to_f32_vector();
      ASSERT_EQ(have.size(), want.size()) << key;
      float scale = 0, worst = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(want[i]));
        worst = std::max(worst, std::fabs(have[i] - want[i]));
      }
      ASSERT_GT(scale, 0.0f) << key;
      EXPECT_LE(worst, 1e-4f * scale) << key << ": max |ours - PEFT's| " << worst << ", largest " << scale;
      seen.insert(key);
    }
  }
  EXPECT_EQ(seen.size(), c.adapters) << c.name << ": adapters compared";
  const std::vector<std::string>& names = ref.names();
  EXPECT_EQ(static_cast<size_t>(std::count_if(names.begin(), names.end(),
                                              [](const std::string& n) { return n.rfind("grad.", 0) == 0; })),
            c.adapters)
      << c.name << ": PEFT's gradients in the reference";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraPeftGrads,
                         ::testing::Values(Case{"gpt2", "gpt2", 16}, Case{"llama3", "llama3", 28},
                                           Case{"qwen2", "qwen2", 28}, Case{"gpt2_wte", "gpt2", 5},
                                           Case{"gpt2_lm_head", "gpt2", 5}, Case{"llama3_saved", "llama3", 10}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
