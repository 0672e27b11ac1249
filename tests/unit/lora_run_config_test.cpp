// A run's LoRA settings (config/run_lora.h, issue 20): the run file's lora: section in
// PEFT's keys and the run's own spellings (alpha / lora_alpha, dropout / lora_dropout),
// command-line overrides (target_modules as comma-separated names), --peft (PEFT's
// adapter_config.json) and --adapter (an adapter folder); errors name the key. And
// `zerotrain estimate` with LoRA: gradients and optimizer state of the adapters only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/input_error.h"
#include "common/temp_dir.h"
#include "config/config_dump.h"
#include "config/run_config.h"
#include "model/lora.h"
#include "train/estimate.h"

using namespace zt;
namespace fs = std::filesystem;
using zt::testing::input_error_of;

namespace {

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/";

fs::path write_run(const std::string& name, const std::string& lora_section) {
  const fs::path dir = zt::testing::fresh_test_dir("lora_run_config_", name);
  std::ofstream(dir / "run.yaml") << "model: {path: '" << kData << "hf/llama3'}\n" << lora_section;
  return dir / "run.yaml";
}

}  // namespace

TEST(LoraRunConfig, TheSectionTakesPeftsKeysAndTheRunsSpellings) {
  const fs::path run = write_run("section",
                                 "lora:\n  r: 8\n  lora_alpha: 16\n  lora_dropout: 0.05\n  target_modules: all-linear\n"
                                 "  use_rslora: true\n  init_lora_weights: gaussian\n");
  const config::TrainConfig c = config::load_train_config({run.string()});
  ASSERT_TRUE(c.lora.has_value());
  EXPECT_EQ(c.lora->r, 8);
  EXPECT_DOUBLE_EQ(c.lora->lora_alpha, 16);
  EXPECT_DOUBLE_EQ(c.lora->lora_dropout, 0.05);
  EXPECT_EQ(c.lora->target_form, model::LoraTargetForm::AllLinear);
  EXPECT_TRUE(c.lora->use_rslora);
  EXPECT_EQ(c.lora->init_lora_weights, model::LoraInit::Gaussian);
  EXPECT_TRUE(c.adapter.empty());

  // Overrides, target_modules as names separated by commas.
  const config::TrainConfig o = config::load_train_config(
      {run.string(), "--lora.alpha", "32", "--lora.target_modules", "q_proj,v_proj", "--lora.lora_dropout", "0"});
  EXPECT_DOUBLE_EQ(o.lora->lora_alpha, 32);
  EXPECT_DOUBLE_EQ(o.lora->lora_dropout, 0);
  EXPECT_EQ(o.lora->target_form, model::LoraTargetForm::Names);
  EXPECT_EQ(o.lora->target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));

  // `zerotrain config check` shows them, with where they came from.
  const std::string dump = config::describe_config(o);
  EXPECT_NE(dump.find("lora = r 8, lora_alpha 32 (scaling 11.3137), lora_dropout 0, target_modules [q_proj, v_proj], "
                      "use_rslora, init gaussian"),
            std::string::npos)
      << dump;

  const std::string with_copies = config::describe_config(config::load_train_config(
      {run.string(), "--lora.bias", "all", "--lora.modules_to_save", "[embed_tokens, lm_head]"}));
  EXPECT_NE(with_copies.find(", bias all, modules_to_save [embed_tokens, lm_head]"), std::string::npos) << with_copies;

  // No section: no LoRA.
  EXPECT_FALSE(config::load_train_config({write_run("none", "").string()}).lora.has_value());
}

TEST(LoraRunConfig, PeftAndAdapterReadPeftsFiles) {
  const fs::path run = write_run("files", "");
  const config::TrainConfig p =
      config::load_train_config({run.string(), "--peft", kData + "peft/llama3_qv/adapter_config.json"});
  ASSERT_TRUE(p.lora.has_value());
  EXPECT_EQ(p.lora->r, 4);
  EXPECT_EQ(p.lora->target_modules, (std::vector<std::string>{"v_proj", "q_proj"}));
  EXPECT_TRUE(p.adapter.empty());
  const config::TrainConfig a = config::load_train_config({run.string(), "--adapter", kData + "peft/llama3_qv"});
  ASSERT_TRUE(a.lora.has_value());
  EXPECT_EQ(a.adapter, kData + "peft/llama3_qv");
  EXPECT_NE(a.lora_source.find("adapter_config.json"), std::string::npos);
}

TEST(LoraRunConfig, ErrorsNameTheKey) {
  std::string e =
      input_error_of([&] { config::load_train_config({write_run("no_targets", "lora: {r: 4}\n").string()}); });
  EXPECT_NE(e.find("lora.target_modules"), std::string::npos) << e;
  e = input_error_of(
      [&] { config::load_train_config({write_run("bad_r", "lora: {r: 0, target_modules: [q_proj]}\n").string()}); });
  EXPECT_NE(e.find("r must be a positive integer"), std::string::npos) << e;
  e = input_error_of([&] {
    config::load_train_config({write_run("dropout", "lora: {dropout: 1.5, target_modules: [q_proj]}\n").string()});
  });
  EXPECT_NE(e.find("lora_dropout"), std::string::npos) << e;
  e = input_error_of([&] {
    config::load_train_config({write_run("unknown", "lora: {rank: 4, target_modules: [q_proj]}\n").string()});
  });
  EXPECT_NE(e.find("rank"), std::string::npos) << e;
  e = input_error_of([&] {
    config::load_train_config({write_run("both", "lora: {r: 4, target_modules: [q_proj]}\n").string(), "--peft",
                               kData + "peft/llama3_qv/adapter_config.json"});
  });
  EXPECT_NE(e.find("keep one"), std::string::npos) << e;
  e = input_error_of([&] {
    config::load_train_config({write_run("missing", "").string(), "--peft", kData + "peft/nothing_here.json"});
  });
  EXPECT_NE(e.find("nothing_here.json"), std::string::npos) << e;
}

// zerotrain estimate: with LoRA the base holds its 16-bit parameters only; gradients,
// master weights and moments are the adapters' (Llama-2-7B, r 16 on every linear: 40.0M
// adapter elements, 32 x (4 x 16 x 8192 + 3 x 16 x 15104)), also with ZeRO-Offload.
TEST(LoraRunConfig, EstimateCountsTheAdaptersStateOnly) {
  train::EstimateInput in;
  in.model = model::preset_config("llama-2-7b");
  in.model_name = "llama-2-7b";
  in.stage = 0;
  in.seq_len = 1024;
  const train::MemoryEstimate full = train::estimate_memory(in);
  model::LoraConfig l;
  l.r = 16;
  l.lora_alpha = 32;
  l.target_form = model::LoraTargetForm::AllLinear;
  in.lora = l;
  in.lora_source = "test";
  const train::MemoryEstimate e = train::estimate_memory(in);
  const int64_t adapters = 32 * (4 * 16 * 8192 + 3 * 16 * 15104);
  EXPECT_GE(e.trainable_elements, adapters);
  EXPECT_LT(e.trainable_elements, adapters + 32 * 1024);  // unit padding only
  EXPECT_EQ(full.trainable_elements, full.padded_elements);
  // bf16: parameters 2 bytes each (base and adapters); the adapters' bf16 gradients, f32
  // master and two f32 moments.
  EXPECT_EQ(e.gpu_model_states, e.padded_elements * 2 + e.trainable_elements * (2 + 12));
  EXPECT_LT(e.gpu_model_states, full.gpu_model_states / 7);
  // With the optimizer offloaded (stage 2, 2 GPUs): the host holds the adapters' state and
  // staging only, the GPU the base and the adapters' gradients.
  in.stage = 2;
  in.gpus_per_node = 2;
  in.offload_optimizer = config::OffloadDevice::CPU;
  const train::MemoryEstimate off = train::estimate_memory(in);
  const int64_t owned = off.trainable_elements / 2;
  EXPECT_EQ(off.cpu_bytes_per_node, 2 * owned * (12 + 4 + 2));  // state, f32 gradient and bf16 staging
  EXPECT_EQ(off.gpu_model_states, off.padded_elements * 2 + owned * 4);
}
