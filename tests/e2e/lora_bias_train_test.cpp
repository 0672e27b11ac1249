// LoRA with PEFT's trained biases (bias "all" / "lora_only", issue 20) through `zerotrain
// train` on the HF-made tiny GPT-2 (tests/data/hf/gpt2, Conv1D with biases everywhere): the
// trained copies live in the adapter units (the base stays frozen and bitwise), start at the
// base's values, get the gradients finite differences give, are saved under PEFT's keys,
// load back from a PEFT-made adapter with PEFT's logits, resume bit for bit, and train at
// stage 3 as at stage 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/fixture_tokenizer.h"
#include "common/input_error.h"
#include "common/run_steps.h"
#include "common/peft_reference.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "model/transformer.h"
#include "model/lora.h"
#include "model/lora_adapter.h"
#include "train/step_protocol.h"
#include "train/trainer.h"
#include "train/training_run.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/";
const std::string kGpt2 = kData + "hf/gpt2";

fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("lora_bias_", name); }

std::string write_tokenizer(const fs::path& dir) { return zt::testing::write_fixture_tokenizer(dir); }

// small_run (6 steps, checkpoints at 3 and 6) on GPT-2 with LoRA r 4 on c_attn.
config::TrainConfig bias_run(const fs::path& dir, const std::string& bias, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{
      "--model.preset", "",  "--model.path", kGpt2, "--model.tokenizer",     write_tokenizer(dir / "tok"),
      "--lora.r",       "4", "--lora.alpha", "8",   "--lora.target_modules", "c_attn",
      "--lora.bias",    bias};
  a.insert(a.end(), extra.begin(), extra.end());
  return zt::testing::small_run(dir, a);
}

// The base tensor named `name` (an HF name) in the frozen units.
std::vector<float> base_value(model::ParameterRegistry& reg, const std::string& name) {
  for (const auto& u : reg.units())
    if (u->frozen())
      for (const model::ParamEntry& e : u->params())
        if (e.name() == name) return e.value.to_f32_vector();
  ADD_FAILURE() << "no base tensor " << name;
  return {};
}

std::map<std::string, std::vector<float>> trained_copies(model::ParameterRegistry& reg) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& u : reg.units())
    if (model::is_lora_unit(*u))
      for (const model::ParamEntry& e : u->params())
        if (model::is_trained_base_copy(e.spec)) out[e.name()] = e.value.to_f32_vector();
  return out;
}

std::vector<std::string> gpt2_biases(int64_t layers, bool all) {
  std::vector<std::string> names;
  for (int64_t l = 0; l < layers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    names.push_back(h + "attn.c_attn.bias");
    if (!all) continue;
    for (const char* m : {"ln_1.bias", "attn.c_proj.bias", "ln_2.bias", "mlp.c_fc.bias", "mlp.c_proj.bias"})
      names.push_back(h + m);
  }
  if (all) names.push_back("transformer.ln_f.bias");
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// bias all / lora_only: the adapter units hold copies of exactly PEFT's trained biases, at
// the base's values; after two steps they moved while every base unit kept its bytes, and
// the optimizer's state is the adapter units' alone.
TEST(LoraBiasTrain, TheRightBiasesTrainAndTheBaseStaysBitwise) {
  for (const std::string bias : {"all", "lora_only"}) {
    SCOPED_TRACE(bias);
    const fs::path a = temp_dir("which_" + bias);
    std::unique_ptr<train::TrainingRun> run = train::start_training_run(bias_run(a, bias));
    model::ParameterRegistry& reg = run->model().registry();
    const int64_t layers = run->model().config().num_layers;
    const std::map<std::string, std::vector<float>> start = trained_copies(reg);
    std::vector<std::string> names;
    for (const auto& [name, value] : start) {
      names.push_back(name);
      EXPECT_EQ(value, base_value(reg, name)) << name;  // the copy starts at the base's values
    }
    EXPECT_EQ(names, gpt2_biases(layers, bias == "all"));
    std::map<std::string, std::vector<float>> frozen_before;
    for (const auto& u : reg.units())
      if (u->frozen()) frozen_before[u->name()] = u->flat_params().to_f32_vector();

    zt::testing::run_optimizer_steps(*run, 2);

    for (const auto& u : reg.units()) {
      if (u->frozen()) {
        EXPECT_FALSE(u->has_grads()) << u->name();
        EXPECT_EQ(u->flat_params().to_f32_vector(), frozen_before[u->name()]) << u->name();
      } else {
        EXPECT_TRUE(model::is_lora_unit(*u)) << u->name();
      }
    }
    for (const auto& [name, value] : trained_copies(reg)) EXPECT_NE(value, start.at(name)) << name;
    for (const zero::StateSlice& s : run->optimizer->state_slices()) EXPECT_EQ(s.name.rfind("lora.", 0), 0u) << s.name;
    run.reset();
    fs::remove_all(a);
  }
}

// The trained biases' gradients (f32, CPU, no dropout) against central differences of the
// summed loss through the same model (f32 forward: a loose tolerance; the kernels are the
// full fine-tune's, whose gradients tests/grad checks tightly).
TEST(LoraBiasTrain, BiasGradientsMatchFiniteDifferences) {
  const fs::path a = temp_dir("fd");
  std::unique_ptr<train::TrainingRun> run = train::start_training_run(bias_run(a, "all", {"--lora.dropout", "0"}));
  model::Transformer& m = run->model();
  m.set_mode(model::Mode::Eval);
  OwnedTensor tok({run->micro_batch, run->seq_len}, DType::I32), tgt({run->micro_batch, run->seq_len}, DType::I32);
  run->loader->next(tok, tgt);
  model::ParameterRegistry& reg = m.registry();
  for (const auto& u : reg.units())
    if (u->has_grads()) u->flat_grads().zero();
  const ops::CrossEntropyResult r = m.forward_backward(tok, tgt, 1.0f);
  ASSERT_GT(r.count, 0);
  const auto loss = [&] {
    const ops::CrossEntropyResult x = m.forward(tok, tgt);
    return x.loss_sum;
  };
  int checked = 0;
  for (const auto& u : reg.units()) {
    if (!model::is_lora_unit(*u)) continue;
    for (const model::ParamEntry& e : u->params()) {
      if (!model::is_trained_base_copy(e.spec)) continue;
      ASSERT_EQ(e.value.dtype(), DType::F32);
      const std::vector<float> grad = e.grad.to_f32_vector();
      for (int64_t i : {int64_t{0}, e.numel() / 2, e.numel() - 1}) {
        float* v = e.value.data_as<float>() + i;
        const float keep = *v, h = 1e-2f;
        *v = keep + h;
        const double up = loss();
        *v = keep - h;
        const double down = loss();
        *v = keep;
        const double fd = (up - down) / (2.0 * h);
        // f32 sums of ~10^3 token losses carry ~1e-3 of noise: ~0.05 in a difference over 2h
        // (a sanity check; the next test compares with the full fine-tune's gradients tightly).
        EXPECT_NEAR(grad[static_cast<size_t>(i)], fd, 0.1 + 0.02 * std::fabs(fd)) << e.name() << "[" << i << "]";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 30);

  // At the init (B = 0) the LoRA model is the base: each trained copy's gradient is the
  // gradient a full fine-tune of the base computes for that bias.
  model::Pretrained full = model::load_pretrained(kGpt2);
  full.model->set_mode(model::Mode::Eval);
  const ops::CrossEntropyResult rf = full.model->forward_backward(tok, tgt, 1.0f);
  EXPECT_EQ(rf.count, r.count);
  int compared = 0;
  for (const auto& u : reg.units()) {
    if (!model::is_lora_unit(*u)) continue;
    for (const model::ParamEntry& e : u->params()) {
      if (!model::is_trained_base_copy(e.spec)) continue;
      for (const auto& fu : full.model->registry().units())
        for (const model::ParamEntry& fe : fu->params()) {
          if (fe.name() != e.name()) continue;
          const std::vector<float> want = fe.grad.to_f32_vector(), have = e.grad.to_f32_vector();
          ASSERT_EQ(have.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i)
            EXPECT_NEAR(have[i], want[i], 1e-5 * std::max(1.0f, std::fabs(want[i]))) << e.name() << "[" << i << "]";
          ++compared;
        }
    }
  }
  EXPECT_EQ(compared, 13);  // 2 layers x 6 biases + ln_f
  run.reset();
  fs::remove_all(a);
}

// final/ holds the trained biases under PEFT's keys (".base_layer" for an adapted linear's),
// which load_lora_adapter reads back; the config says the bias mode.
TEST(LoraBiasTrain, FinalHoldsTheTrainedBiasesUnderPeftsKeys) {
  const fs::path a = temp_dir("final");
  const train::TrainResult r = train::run_training(bias_run(a, "all", {"--max_steps", "2", "--save_strategy", "no"}));
  const io::SafetensorsReader file((fs::path(r.final_model_dir) / "adapter_model.safetensors").string());
  std::vector<std::string> biases;
  for (const std::string& n : file.names())
    if (n.find("lora_") == std::string::npos) biases.push_back(n);
  std::sort(biases.begin(), biases.end());
  const model::ModelConfig base = model::load_hf_config(kGpt2);
  std::vector<std::string> want;
  for (const std::string& n : gpt2_biases(base.num_layers, true))
    want.push_back(model::peft_base_key(n, n.find("c_attn") != std::string::npos));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(biases, want);
  EXPECT_NE(std::find(want.begin(), want.end(), "base_model.model.transformer.h.0.attn.c_attn.base_layer.bias"),
            want.end());
  EXPECT_NE(std::find(want.begin(), want.end(), "base_model.model.transformer.h.1.ln_2.bias"), want.end());
  std::ifstream in(fs::path(r.final_model_dir) / "adapter_config.json");
  EXPECT_NE(std::string(std::istreambuf_iterator<char>(in), {}).find("\"bias\": \"all\""), std::string::npos);
  const model::LoraAdapter back = model::load_lora_adapter(r.final_model_dir, base);
  EXPECT_EQ(back.replaced.size(), want.size());
  fs::remove_all(a);
}

// A PEFT 0.12 adapter with bias "all" (tests/data/peft/gpt2_all_linear) as --adapter of a
// training run: the trained copies take its biases, and the unmerged model gives PEFT's
// logits (reference.safetensors) within 1e-5 of their range.
TEST(LoraBiasTrain, PeftAdapterWithBiasesGivesPeftsLogits) {
  const fs::path a = temp_dir("peft_all");
  const std::string adapter = kData + "peft/gpt2_all_linear";
  const zt::testing::PeftReference ref(adapter);
  std::unique_ptr<train::TrainingRun> run = train::start_training_run(
      zt::testing::small_run(a, {"--model.preset", "", "--model.path", kGpt2, "--model.tokenizer",
                                 write_tokenizer(a / "tok"), "--adapter", adapter}));
  model::Transformer& m = run->model();
  const io::SafetensorsReader file(adapter + "/adapter_model.safetensors");
  EXPECT_EQ(trained_copies(m.registry()).at("transformer.h.1.ln_2.bias"),
            file.tensor("base_model.model.transformer.h.1.ln_2.bias").to_f32_vector());
  EXPECT_LE(ref.worst_diff(ref.logits_of(m)), ref.tolerance);
  run.reset();
  fs::remove_all(a);
}

TEST(LoraBiasTrain, ResumedRunIsBitwiseIdenticalToAnUninterruptedOne) {
  const fs::path a = temp_dir("full"), b = temp_dir("resumed");
  const train::TrainResult full = train::run_training(bias_run(a, "all"));
  ASSERT_EQ(full.losses.size(), 6u);
  const fs::path step3 = a / "run" / "checkpoints" / "global_step3";
  const train::TrainResult resumed = train::run_training(bias_run(b, "all", {"--resume", step3.string()}));
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(zt::testing::file_bytes(fs::path(full.final_model_dir) / "adapter_model.safetensors"),
            zt::testing::file_bytes(fs::path(resumed.final_model_dir) / "adapter_model.safetensors"));
  fs::remove_all(a);
  fs::remove_all(b);
}

// Stage 3's partitioned machinery on one process (the trained copies' slices filled from
// the base's files) trains as stage 0.
TEST(LoraBiasTrain, StageThreeTrainsAsStageZero) {
  for (const std::string bias : {"all", "lora_only"}) {
    SCOPED_TRACE(bias);
    const fs::path s0 = temp_dir("stage0_" + bias), s3 = temp_dir("stage3_" + bias);
    const std::vector<std::string> shorter{"--max_steps", "3", "--save_interval", "0", "--eval_interval", "0"};
    const train::TrainResult r0 = train::run_training(bias_run(s0, bias, shorter));
    ::setenv("ZT_ZERO_KEEP_STAGE", "1", 1);
    std::vector<std::string> stage3 = shorter;
    stage3.insert(stage3.end(), {"--zero_optimization.stage", "3"});
    const train::TrainResult r3 = train::run_training(bias_run(s3, bias, stage3));
    ::unsetenv("ZT_ZERO_KEEP_STAGE");
    ASSERT_EQ(r0.losses.size(), 3u);
    ASSERT_EQ(r3.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(r3.losses[i], r0.losses[i], 1e-6 * r0.losses[i]) << "step " << i + 1;
    fs::remove_all(s0);
    fs::remove_all(s3);
  }
}

// lora_only on a packed bias field whose modules are only partly adapted (Qwen2's q/k/v
// biases are one view here, k_proj adapted alone): k's bias trains as bias all trains it (the
// same gradient), q's and v's are held: zero gradient, the base's values after two steps, not
// in final/ (PEFT trains and saves the adapted layers' biases only).
TEST(LoraBiasTrain, LoraOnlyHoldsThePackedBiasesOfUnadaptedModules) {
  const fs::path a = temp_dir("qwen2_partial"), b = temp_dir("qwen2_all");
  const auto qwen2_run = [&](const fs::path& dir, const std::string& bias) {
    return zt::testing::small_run(dir, {"--model.preset", "", "--model.path", kData + "hf/qwen2", "--model.tokenizer",
                                        write_tokenizer(dir / "tok"), "--lora.r", "4", "--lora.target_modules",
                                        "k_proj", "--lora.bias", bias, "--max_steps", "2"});
  };
  const std::string l0 = "model.layers.0.self_attn.";
  std::map<std::string, std::vector<float>> grads[2];
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<train::TrainingRun> run = train::start_training_run(qwen2_run(i ? b : a, i ? "all" : "lora_only"));
    OwnedTensor tok({run->micro_batch, run->seq_len}, DType::I32), tgt({run->micro_batch, run->seq_len}, DType::I32);
    train::OptimizerStep step(*run);
    train::OptimizerStep::MicroBatch micro = step.micro_batch();
    run->loader->next(tok, tgt);
    micro.forward_backward(tok, tgt);
    for (const auto& u : run->model().registry().units())
      if (model::is_lora_unit(*u) && u->has_grads())
        for (const model::ParamEntry& e : u->params())
          if (model::is_trained_base_copy(e.spec)) grads[i][e.name()] = e.grad.to_f32_vector();
  }
  ASSERT_TRUE(grads[0].count(l0 + "k_proj.bias"));
  EXPECT_EQ(grads[0][l0 + "k_proj.bias"], grads[1][l0 + "k_proj.bias"]);  // trained as bias all trains it
  for (const char* held : {"q_proj.bias", "v_proj.bias"}) {
    ASSERT_TRUE(grads[0].count(l0 + held)) << held;
    const std::vector<float>& g = grads[0][l0 + held];
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return x == 0.0f; })) << held;
    const std::vector<float>& trained = grads[1][l0 + held];
    EXPECT_TRUE(std::any_of(trained.begin(), trained.end(), [](float x) { return x != 0.0f; })) << held;
  }

  const fs::path c = temp_dir("qwen2_partial_run");
  std::unique_ptr<train::TrainingRun> run = train::start_training_run(qwen2_run(c, "lora_only"));
  model::ParameterRegistry& reg = run->model().registry();
  const std::map<std::string, std::vector<float>> start = trained_copies(reg);
  zt::testing::run_optimizer_steps(*run, 2);
  const std::map<std::string, std::vector<float>> after = trained_copies(reg);
  EXPECT_NE(after.at(l0 + "k_proj.bias"), start.at(l0 + "k_proj.bias"));
  EXPECT_EQ(after.at(l0 + "q_proj.bias"), base_value(reg, l0 + "q_proj.bias"));
  EXPECT_EQ(after.at(l0 + "v_proj.bias"), base_value(reg, l0 + "v_proj.bias"));
  run.reset();
  const train::TrainResult r = train::run_training(qwen2_run(c / "final_run", "lora_only"));
  const io::SafetensorsReader file((fs::path(r.final_model_dir) / "adapter_model.safetensors").string());
  EXPECT_TRUE(file.contains("base_model.model." + l0 + "k_proj.base_layer.bias"));
  for (const std::string& n : file.names()) EXPECT_EQ(n.find("q_proj.bias"), std::string::npos) << n;
  for (const std::string& n : file.names()) EXPECT_EQ(n.find("v_proj.bias"), std::string::npos) << n;
  for (const fs::path& d : {a, b, c}) fs::remove_all(d);
}
