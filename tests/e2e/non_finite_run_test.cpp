// Non-finite values through the command line (docs/checkpoints.md "Non-finite values"):
//  - gradients made NaN at a step (ZT_TEST_NAN_AT_STEP, core/fail_point.h) stop an f32 run
//    with exit 2 before the update; its good checkpoints stay (`latest` the last one, none
//    saved for the NaN step, keep_last pruned nothing for it) and resume; bf16 and fp16
//    skip such a step and go on, and bf16 stops after 3 skipped in a row;
//  - a NaN weight in an HF model is exit 2 naming the file and tensor (eval, lora merge);
//  - `lora merge` with a NaN in the adapter refuses to write the merged model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "common/poke_tensor.h"
#include "common/shell.h"
#include "common/tiny_run.h"
#include "common/temp_dir.h"

namespace fs = std::filesystem;
using zt::testing::sh;
using zt::testing::ShellResult;
using zt::testing::zerotrain_binary;

namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("non_finite_run_")) {}
};

const std::string kData = std::string(ZT_SOURCE_DIR) + "/tests/data/";
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// A 4-step tiny-gpt2 run saving every step, keeping the last 2.
fs::path write_config(const fs::path& dir) { return zt::testing::write_tiny_run(dir, 1, 2); }

ShellResult train(const fs::path& yaml, const std::string& args, const std::string& env = "") {
  return zt::testing::train_tiny_run(yaml, args, env);
}

std::string latest_name(const fs::path& run) {
  std::ifstream in(run / "checkpoints" / "latest");
  std::string name;
  in >> name;
  return name;
}

}  // namespace

TEST(NonFiniteRun, F32RunStopsBeforeTheUpdateAndKeepsItsGoodCheckpoints) {
  ASSERT_TRUE(fs::exists(zerotrain_binary()));
  TempDir tmp;
  const fs::path yaml = write_config(tmp.path());
  const fs::path ckpts = tmp.path() / "run" / "checkpoints";
  ShellResult r = train(yaml, "", "ZT_TEST_NAN_AT_STEP=3");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("step 3: the gradients are not finite"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp32 run: stopped before the optimizer applied them"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step      3/4"), std::string::npos) << r.out;  // no step line, no update
  EXPECT_TRUE(fs::exists(ckpts / "global_step1" / "manifest.json"));
  EXPECT_TRUE(fs::exists(ckpts / "global_step2" / "manifest.json"));
  EXPECT_FALSE(fs::exists(ckpts / "global_step3"));
  EXPECT_EQ(latest_name(tmp.path() / "run"), "global_step2");
  EXPECT_FALSE(fs::exists(tmp.path() / "run" / "final"));
  // The kept checkpoint is good: the run resumes from it and finishes.
  r = train(yaml, "--resume latest");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from " + (ckpts / "global_step2").string()), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(ckpts / "global_step4" / "manifest.json"));
}

// bf16 (check_grad_overflow, the default) and fp16 skip a NaN step, as DeepSpeed does, and
// train on; bf16 stops once 3 steps in a row are skipped (NaN weights or state would keep
// every later step NaN), as does bf16 without the check at the first one.
TEST(NonFiniteRun, Bf16AndFp16SkipANanStepAndBf16StopsAfterThreeInARow) {
  ASSERT_TRUE(fs::exists(zerotrain_binary()));
  for (const char* precision : {"--bf16 true", "--fp16 true"}) {
    SCOPED_TRACE(precision);
    TempDir tmp;
    const ShellResult r = train(write_config(tmp.path()), precision, "ZT_TEST_NAN_AT_STEP=2");
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("overflow: skipped (1 so far)"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(tmp.path() / "run" / "final"));
  }
  {
    TempDir tmp;
    const ShellResult r = train(write_config(tmp.path()), "--bf16 true", "ZT_TEST_NAN_AT_STEP=2+");
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("step 4: the gradients are not finite"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("in 3 steps in a row"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(tmp.path() / "run" / "final"));
  }
}

TEST(NonFiniteRun, NanWeightsInAModelOrAdapterAreExitTwoNamingTheTensor) {
  ASSERT_TRUE(fs::exists(zerotrain_binary()));
  TempDir tmp;
  // The base model with a NaN weight: eval and lora merge refuse it.
  const fs::path base = tmp.path() / "gpt2";
  fs::copy(kData + "hf/gpt2", base);
  const std::string weights = (base / "model.safetensors").string();
  zt::testing::poke_tensor(weights, "transformer.h.1.attn.c_proj.weight", 7, kNaN);
  std::ofstream(tmp.path() / "text.txt") << "Some text to evaluate the model on.\n";
  ShellResult r = sh(zerotrain_binary() + " eval --model " + base.string() + " --tokenizer bytes --data " +
                     (tmp.path() / "text.txt").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(weights), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'transformer.h.1.attn.c_proj.weight' holds non-finite values"), std::string::npos) << r.out;
  const std::string out = (tmp.path() / "merged").string();
  r = sh(zerotrain_binary() + " lora merge " + base.string() + " " + kData + "peft/gpt2_c_attn " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("'transformer.h.1.attn.c_proj.weight'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  // A good base with a NaN in the adapter: the merged weight would be NaN.
  const fs::path adapter = tmp.path() / "adapter";
  fs::copy(kData + "peft/gpt2_c_attn", adapter);
  zt::testing::poke_tensor((adapter / "adapter_model.safetensors").string(),
                           "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", 5, kNaN);
  r = sh(zerotrain_binary() + " lora merge " + kData + "hf/gpt2 " + adapter.string() + " " + out);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("adapter_model.safetensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'transformer.h.0.attn.c_attn.weight' gives non-finite values"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}
