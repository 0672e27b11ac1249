// A LoRA fine-tune through `zerotrain train` (issue 20) on the HF-made tiny Llama-3
// (tests/data/hf/llama3): final/ is the PEFT adapter folder (PEFT's config keys and tensor
// names, read back by load_lora_adapter; no base weights), checkpoints hold the adapters'
// state only and a resumed run continues bit for bit, the base stays bitwise through steps,
// `zerotrain consolidate` writes the same adapter folder, PEFT-made adapters (--adapter,
// eval --adapter) give PEFT's logits (Llama packed q/v, GPT-2 Conv1D, rslora, biases,
// modules_to_save), training continues from one, stage 3's partitioned machinery and
// ZeRO-Offload (host, NVMe) train the same, and what LoRA training does not implement exits 2
// naming the setting.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/consolidate.h"
#include "common/fixture_tokenizer.h"
#include "common/input_error.h"
#include "common/shell.h"
#include "common/run_steps.h"
#include "common/peft_reference.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "model/lora.h"
#include "model/lora_adapter.h"
#include "train/step_protocol.h"
#include "train/trainer.h"
#include "train/training_run.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/";
const std::string kBase = kData + "hf/llama3";

fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("lora_train_", name); }

using zt::testing::file_bytes;
using zt::testing::input_error_of;

// A byte-level BPE of 300 tokens (the fixture has 320 rows) beside the run.
std::string write_tokenizer(const fs::path& dir) { return zt::testing::write_fixture_tokenizer(dir); }

// small_run (6 steps, checkpoints at 3 and 6) on the Llama-3 fixture with LoRA r 4 on
// q_proj, v_proj (packed in the qkv field) and down_proj.
std::vector<std::string> lora_args(const fs::path& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{
      "--model.preset", "",  "--model.path", kBase, "--model.tokenizer",     write_tokenizer(dir / "tok"),
      "--lora.r",       "4", "--lora.alpha", "8",   "--lora.target_modules", "q_proj,v_proj,down_proj"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

config::TrainConfig lora_run(const fs::path& dir, std::vector<std::string> extra = {}) {
  return zt::testing::small_run(dir, lora_args(dir, std::move(extra)));
}

std::vector<std::string> sorted_names(const io::SafetensorsReader& file) {
  std::vector<std::string> names = file.names();
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST(LoraTrain, FinalIsThePeftAdapterFolderAndCheckpointsHoldTheAdaptersOnly) {
  const fs::path a = temp_dir("final");
  const train::TrainResult r = train::run_training(lora_run(a));
  ASSERT_EQ(r.steps, 6);
  const fs::path final_dir = r.final_model_dir;
  EXPECT_TRUE(fs::exists(final_dir / "adapter_config.json"));
  EXPECT_TRUE(fs::exists(final_dir / "adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(final_dir / "tokenizer.json"));
  EXPECT_FALSE(fs::exists(final_dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(final_dir / "config.json"));

  // PEFT's adapter_config.json.
  std::ifstream in(final_dir / "adapter_config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("peft_type"), "LORA");
  EXPECT_EQ(j.at("task_type"), "CAUSAL_LM");
  EXPECT_EQ(j.at("base_model_name_or_path"), kBase);
  EXPECT_EQ(j.at("r"), 4);
  EXPECT_EQ(j.at("lora_alpha"), 8);
  EXPECT_EQ(j.at("bias"), "none");
  EXPECT_EQ(j.at("fan_in_fan_out"), false);
  EXPECT_EQ(j.at("use_rslora"), false);
  EXPECT_EQ(j.at("init_lora_weights"), true);
  EXPECT_TRUE(j.at("modules_to_save").is_null());
  EXPECT_EQ(j.at("target_modules"), nlohmann::json::array({"q_proj", "v_proj", "down_proj"}));

  // PEFT's tensor names and shapes, f32; load_lora_adapter reads them for this base.
  const model::ModelConfig base = model::load_hf_config(kBase);
  const io::SafetensorsReader file((final_dir / "adapter_model.safetensors").string());
  std::vector<std::string> want;
  for (int64_t l = 0; l < base.num_layers; ++l)
    for (const char* m : {"self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"})
      for (char w : {'A', 'B'}) want.push_back(model::peft_lora_key(base, l, m, w));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(sorted_names(file), want);
  EXPECT_EQ(file.info("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight").shape, (Shape{32, 4}));
  EXPECT_EQ(file.info("base_model.model.model.layers.0.mlp.down_proj.lora_A.weight").shape, (Shape{4, 160}));
  const model::LoraAdapter adapter = model::load_lora_adapter(final_dir.string(), base);
  ASSERT_EQ(adapter.factors.size(), 6u);
  for (const model::LoraFactors& f : adapter.factors) {
    // Trained: B moved away from its zero init.
    const std::vector<float> b = f.b->to_f32_vector();
    EXPECT_TRUE(std::any_of(b.begin(), b.end(), [](float v) { return v != 0.0f; })) << f.module.name;
    EXPECT_EQ(f.a->to_f32_vector(),
              file.tensor(model::peft_lora_key(base, f.layer, f.module.name, 'A')).to_f32_vector());
  }

  // The checkpoint: the adapters' parameters and optimizer state, nothing of the base.
  const fs::path step6 = a / "run" / "checkpoints" / "global_step6";
  const io::SafetensorsReader shard((step6 / "shard_rank0.safetensors").string());
  for (const std::string& name : shard.names()) EXPECT_EQ(name.rfind("lora.", 0), 0u) << name;
  EXPECT_GT(shard.names().size(), 2u);  // params, master/moments of lora.0 and lora.1

  // consolidate writes the same adapter folder from the checkpoint alone.
  const fs::path out = a / "consolidated";
  checkpoint::ConsolidateOptions co;
  checkpoint::consolidate_checkpoint(step6.string(), out.string(), co);
  EXPECT_EQ(file_bytes(out / "adapter_model.safetensors"), file_bytes(final_dir / "adapter_model.safetensors"));
  EXPECT_EQ(file_bytes(out / "adapter_config.json"), file_bytes(final_dir / "adapter_config.json"));
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));

  // eval --adapter on the trained folder runs (the merged model), and so does the folder
  // given as --model (its base_model_name_or_path is the fixture).
  std::ofstream(a / "text.txt") << "LoRA adapters train a frozen base.";
  const auto e = zt::testing::sh(zt::testing::zerotrain_binary() + " eval --model " + kBase + " --adapter " +
                                 final_dir.string() + " --tokenizer bytes --data " + (a / "text.txt").string());
  EXPECT_EQ(e.rc, 0) << e.out;
  const auto e2 = zt::testing::sh(zt::testing::zerotrain_binary() + " eval --model " + final_dir.string() +
                                  " --tokenizer bytes --data " + (a / "text.txt").string());
  EXPECT_EQ(e2.rc, 0) << e2.out;
  const auto loss_line = [](const std::string& out) {
    const size_t at = out.find("mean loss");
    return at == std::string::npos ? std::string("no loss in: ") + out : out.substr(at);
  };
  EXPECT_EQ(loss_line(e.out), loss_line(e2.out));
  // generate on the folder: the base merged with it, the folder's tokenizer.
  const auto g = zt::testing::sh(zt::testing::zerotrain_binary() + " generate --model " + final_dir.string() +
                                 " --prompt 'The license' --max-new-tokens 4 --seed 1");
  EXPECT_EQ(g.rc, 0) << g.out;
  fs::remove_all(a);
}

TEST(LoraTrain, ResumedRunIsBitwiseIdenticalToAnUninterruptedOne) {
  const fs::path a = temp_dir("full"), b = temp_dir("resumed");
  const train::TrainResult full = train::run_training(lora_run(a, {"--lora.dropout", "0.1"}));
  ASSERT_EQ(full.losses.size(), 6u);
  const fs::path step3 = a / "run" / "checkpoints" / "global_step3";
  const train::TrainResult resumed =
      train::run_training(lora_run(b, {"--lora.dropout", "0.1", "--resume", step3.string()}));
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(resumed.final_val_loss, full.final_val_loss);
  EXPECT_EQ(file_bytes(fs::path(full.final_model_dir) / "adapter_model.safetensors"),
            file_bytes(fs::path(resumed.final_model_dir) / "adapter_model.safetensors"));
  fs::remove_all(a);
  fs::remove_all(b);
}

// Through the step protocol: the base units keep their bytes, the adapters change, and the
// optimizer's state is the adapters' alone.
TEST(LoraTrain, TheBaseStaysBitwiseAndOnlyTheAdaptersHaveOptimizerState) {
  const fs::path a = temp_dir("frozen");
  std::unique_ptr<train::TrainingRun> run = train::start_training_run(lora_run(a));
  model::ParameterRegistry& reg = run->model().registry();
  std::map<std::string, std::vector<float>> before;
  for (const auto& u : reg.units()) before[u->name()] = u->flat_params().to_f32_vector();
  zt::testing::run_optimizer_steps(*run, 2);
  int frozen = 0, adapters = 0;
  for (const auto& u : reg.units()) {
    if (u->frozen()) {
      ++frozen;
      EXPECT_FALSE(u->has_grads()) << u->name();
      EXPECT_EQ(u->flat_params().to_f32_vector(), before[u->name()]) << u->name();
    } else {
      ++adapters;
      EXPECT_TRUE(model::is_lora_unit(*u)) << u->name();
      EXPECT_NE(u->flat_params().to_f32_vector(), before[u->name()]) << u->name();
    }
  }
  EXPECT_EQ(adapters, 2);
  EXPECT_GT(frozen, 2);
  for (const zero::StateSlice& s : run->optimizer->state_slices()) EXPECT_EQ(s.name.rfind("lora.", 0), 0u) << s.name;
  run.reset();
  fs::remove_all(a);
}

// PEFT 0.12 adapters (tests/data/peft) against PEFT's logits of the adapted model
// (reference.safetensors: merge_and_unload()'s, which equal the unmerged PeftModel's to
// rounding), within 1e-5 of their range:
//  - as --adapter of a training run (the unmerged adapter units): Llama-3's q_proj/v_proj
//    (packed in the qkv field) and GPT-2's c_attn (Conv1D base, fan_in_fan_out);
//  - through `zerotrain eval --adapter` (merged at load) for all five fixtures, with
//    rslora, bias all / lora_only, modules_to_save and gaussian init among them.
// Training then continues from one, and final/ keeps its settings.
namespace {}  // namespace

TEST(LoraTrain, PeftAdaptersGivePeftsLogits) {
  for (const auto& [name, base] : {std::make_pair("llama3_qv", "llama3"), std::make_pair("gpt2_c_attn", "gpt2")}) {
    SCOPED_TRACE(name);
    const fs::path a = temp_dir(std::string("peft_") + name);
    const std::string adapter = kData + "peft/" + name;
    const zt::testing::PeftReference ref(adapter);
    config::TrainConfig c =
        zt::testing::small_run(a, {"--model.preset", "", "--model.path", kData + "hf/" + base, "--model.tokenizer",
                                   write_tokenizer(a / "tok"), "--adapter", adapter});
    ASSERT_TRUE(c.lora.has_value());
    EXPECT_EQ(c.adapter, adapter);
    std::unique_ptr<train::TrainingRun> run = train::start_training_run(c);
    model::Transformer& m = run->model();
    EXPECT_LE(ref.worst_diff(ref.logits_of(m)), ref.tolerance);
    run.reset();
    fs::remove_all(a);
  }
  for (const auto& [name, base] : {std::make_pair("llama3_qv", "llama3"), std::make_pair("llama3_all", "llama3"),
                                   std::make_pair("gpt2_c_attn", "gpt2"), std::make_pair("gpt2_all_linear", "gpt2"),
                                   std::make_pair("qwen2_lora_only", "qwen2")}) {
    SCOPED_TRACE(name);
    const fs::path a = temp_dir(std::string("eval_") + name);
    const std::string adapter = kData + "peft/" + name;
    const zt::testing::PeftReference ref(adapter);
    std::ofstream(a / "text.txt") << ref.text;
    const std::string dump = (a / "logits.safetensors").string();
    const auto e =
        zt::testing::sh(zt::testing::zerotrain_binary() + " eval --model " + kData + "hf/" + base + " --adapter " +
                        adapter + " --tokenizer bytes --data " + (a / "text.txt").string() + " --dump-logits " + dump);
    ASSERT_EQ(e.rc, 0) << e.out;
    EXPECT_LE(ref.worst_diff(io::SafetensorsReader(dump).tensor("logits.0").to_f32_vector()), ref.tolerance);
    fs::remove_all(a);
  }
}

TEST(LoraTrain, TrainingContinuesFromAPeftAdapter) {
  const fs::path b = temp_dir("peft_adapter_run");
  const std::string adapter = kData + "peft/llama3_qv";
  const train::TrainResult r = train::run_training(zt::testing::small_run(
      b, {"--model.preset", "", "--model.path", kBase, "--model.tokenizer", write_tokenizer(b / "tok"), "--adapter",
          adapter, "--max_steps", "2", "--save_strategy", "no"}));
  const model::LoraAdapter trained = model::load_lora_adapter(r.final_model_dir, model::load_hf_config(kBase));
  EXPECT_EQ(trained.modules.size(), 2u);  // q_proj and v_proj, as the adapter had
  EXPECT_DOUBLE_EQ(trained.config.lora_alpha, 8);
  // The trained A moved from the adapter's.
  const model::LoraAdapter start = model::load_lora_adapter(adapter, model::load_hf_config(kBase));
  EXPECT_NE(trained.factors[0].a->to_f32_vector(), start.factors[0].a->to_f32_vector());
  fs::remove_all(b);
}

// Stage 3's partitioned machinery on one process (ZT_ZERO_KEEP_STAGE=1: the adapters' and
// the frozen base's slices filled from the files and the init) trains as stage 0.
TEST(LoraTrain, StageThreeSlicesTrainAsStageZero) {
  const fs::path s0 = temp_dir("stage0"), s3 = temp_dir("stage3");
  const std::vector<std::string> shorter{"--max_steps", "3", "--save_interval", "0", "--eval_interval", "0"};
  const train::TrainResult r0 = train::run_training(lora_run(s0, shorter));
  ::setenv("ZT_ZERO_KEEP_STAGE", "1", 1);
  std::vector<std::string> stage3 = shorter;
  stage3.insert(stage3.end(), {"--zero_optimization.stage", "3"});
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const train::TrainResult r3 = train::run_training(lora_run(s3, stage3));
  const std::string log = ::testing::internal::GetCapturedStdout() + ::testing::internal::GetCapturedStderr();
  ::unsetenv("ZT_ZERO_KEEP_STAGE");
  EXPECT_NE(log.find("ZeRO stage 3 over 1 rank"), std::string::npos) << log;
  ASSERT_EQ(r0.losses.size(), 3u);
  ASSERT_EQ(r3.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(r3.losses[i], r0.losses[i], 1e-6 * r0.losses[i]) << "step " << i + 1;
  EXPECT_TRUE(fs::exists(fs::path(r3.final_model_dir) / "adapter_model.safetensors"));
  fs::remove_all(s0);
  fs::remove_all(s3);
}

// ZeRO-Offload with LoRA: the adapters' optimizer state on the host (stage 2) or on NVMe
// with the frozen base's slices swapped there too (stage 3, offload_param nvme, max_in_cpu
// 0), bitwise the plain run's adapters; a resume of the NVMe run continues bit for bit.
TEST(LoraTrain, OffloadTrainsAsThePlainRun) {
  const fs::path plain = temp_dir("plain"), cpu = temp_dir("offload_cpu"), nvme = temp_dir("offload_nvme"),
                 resumed = temp_dir("offload_resumed");
  const std::vector<std::string> nvme_args{"--zero_optimization.stage",
                                           "3",
                                           "--zero_optimization.offload_optimizer.device",
                                           "nvme",
                                           "--zero_optimization.offload_optimizer.nvme_path",
                                           (nvme / "swap").string(),
                                           "--zero_optimization.offload_param.device",
                                           "nvme",
                                           "--zero_optimization.offload_param.nvme_path",
                                           (nvme / "swap").string(),
                                           "--zero_optimization.offload_param.max_in_cpu",
                                           "0"};
  const train::TrainResult p = train::run_training(lora_run(plain));
  const train::TrainResult c = train::run_training(
      lora_run(cpu, {"--zero_optimization.stage", "2", "--zero_optimization.offload_optimizer.device", "cpu"}));
  const train::TrainResult n = train::run_training(lora_run(nvme, nvme_args));
  ASSERT_EQ(p.losses.size(), 6u);
  EXPECT_EQ(c.losses, p.losses);
  EXPECT_EQ(n.losses, p.losses);
  const std::string adapters = file_bytes(fs::path(p.final_model_dir) / "adapter_model.safetensors");
  EXPECT_EQ(file_bytes(fs::path(c.final_model_dir) / "adapter_model.safetensors"), adapters);
  EXPECT_EQ(file_bytes(fs::path(n.final_model_dir) / "adapter_model.safetensors"), adapters);
  std::vector<std::string> resume_args = nvme_args;
  resume_args.insert(resume_args.end(), {"--resume", (nvme / "run" / "checkpoints" / "global_step3").string()});
  resume_args[5] = resume_args[9] = (resumed / "swap").string();
  const train::TrainResult r = train::run_training(lora_run(resumed, resume_args));
  ASSERT_EQ(r.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r.losses[i], p.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(file_bytes(fs::path(r.final_model_dir) / "adapter_model.safetensors"), adapters);
  for (const fs::path& d : {plain, cpu, nvme, resumed}) fs::remove_all(d);
}

TEST(LoraTrain, WhatLoraTrainingDoesNotImplementExits2NamingTheSetting) {
  const fs::path a = temp_dir("refusals");
  const auto load = [&](std::vector<std::string> extra) { return lora_run(a, std::move(extra)); };
  std::string e = input_error_of([&] { train::start_training_run(load({"--lora.modules_to_save", "[\"norm\"]"})); });
  EXPECT_NE(e.find("lora.modules_to_save"), std::string::npos) << e;
  e = input_error_of([&] { load({"--lora.alpha", "8", "--lora.lora_alpha", "16"}); });
  EXPECT_NE(e.find("same setting"), std::string::npos) << e;
  e = input_error_of([&] { load({"--lora.init_lora_weights", "pissa"}); });
  EXPECT_NE(e.find("init_lora_weights"), std::string::npos) << e;
  e = input_error_of([&] { load({"--lora.rank", "4"}); });
  EXPECT_NE(e.find("rank"), std::string::npos) << e;
  // The lora: section and an adapter folder both give the settings.
  e = input_error_of([&] { load({"--adapter", kData + "peft/llama3_qv"}); });
  EXPECT_NE(e.find("keep one"), std::string::npos) << e;

  // A target the model does not have: exit 2 listing the names it has, before training.
  e = input_error_of([&] { train::run_training(load({"--lora.target_modules", "[\"query_key_value\"]"})); });
  EXPECT_NE(e.find("query_key_value"), std::string::npos) << e;
  EXPECT_NE(e.find("q_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("down_proj"), std::string::npos) << e;
  fs::remove_all(a);
}
