// The Accelerator API on CPU: a custom loop written with it takes bitwise the same steps
// as `zerotrain train` (train::run_training) on the same config (losses, validation loss,
// final weights); save_state / load_state continue identically; an fp16 overflow makes
// step() return false and leaves the weights alone, skipping as run_training does.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/small_run.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "model/transformer.h"
#include "config/run_config.h"
#include "train/trainer.h"
#include "zerotrain/accelerator.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

// This file's named scratch directories: build/test_tmp/accelerator_<name>_<pid>, emptied first.
fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("accelerator_", name); }

using zt::testing::file_bytes;
using zt::testing::small_run;

// Every parameter byte, in registry order.
std::string weight_bytes(model::Transformer& m) {
  std::string bytes;
  for (const auto& u : m.registry().units()) {
    const Tensor t = u->flat_params();
    bytes.append(static_cast<const char*>(t.data()), t.nbytes());
  }
  return bytes;
}

struct LoopResult {
  std::vector<double> losses;  // of every global step, applied or skipped
  int64_t skipped = 0;
};

// The Accelerate pattern: step() and zero_grad() after every micro-batch (no-ops
// mid-accumulation), until `until` global steps (skipped fp16 steps count, as in
// run_training). `at_step(n)` runs after step n.
template <class AtStep>
LoopResult custom_loop(Accelerator& acc, int64_t until, AtStep at_step) {
  LoopResult r;
  double loss_sum = 0;
  while (acc.global_step() < until) {
    loss_sum += acc.backward(acc.next_batch());
    if (!acc.sync_gradients()) {
      EXPECT_FALSE(acc.step()) << "step() away from the boundary must do nothing";
      acc.zero_grad();
      continue;
    }
    acc.clip_grad_norm(acc.max_grad_norm());
    const int64_t before = acc.global_step(), updates = acc.optimizer_steps();
    const bool applied = acc.step();
    EXPECT_EQ(acc.global_step(), before + 1) << "a skipped step is a global step too";
    EXPECT_EQ(acc.optimizer_steps(), updates + (applied ? 1 : 0));
    EXPECT_FALSE(acc.step()) << "a second step() in one accumulation window";
    EXPECT_EQ(acc.global_step(), before + 1);
    acc.zero_grad();
    r.losses.push_back(loss_sum / static_cast<double>(acc.gradient_accumulation_steps()));
    loss_sum = 0;
    r.skipped += !applied;
    at_step(acc.global_step());
  }
  return r;
}

}  // namespace

TEST(Accelerator, CustomLoopMatchesRunTrainingBitwiseAndResumesIdentically) {
  const fs::path a = temp_dir("trainer"), b = temp_dir("api"), c = temp_dir("resumed");
  const train::TrainResult full = train::run_training(small_run(a));
  ASSERT_EQ(full.losses.size(), 6u);

  Accelerator acc(small_run(b));
  EXPECT_EQ(acc.max_steps(), 6);
  EXPECT_EQ(acc.gradient_accumulation_steps(), 2);
  EXPECT_TRUE(acc.is_main_process());
  EXPECT_EQ(acc.num_processes(), 1);
  std::string step3;
  const LoopResult r = custom_loop(acc, 6, [&](int64_t step) {
    if (step == 3) step3 = acc.save_state((b / "state").string());
  });
  ASSERT_EQ(r.losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.losses[i], full.losses[i]) << "step " << i + 1;
  EXPECT_EQ(acc.evaluate(), full.final_val_loss);
  acc.save_pretrained((b / "final").string());
  EXPECT_EQ(file_bytes(b / "final" / "model.safetensors"),
            file_bytes(fs::path(full.final_model_dir) / "model.safetensors"));
  EXPECT_TRUE(fs::exists(b / "final" / "tokenizer.json"));
  EXPECT_EQ(fs::path(step3).filename(), "global_step3");

  // A fresh Accelerator loads the step-3 state and takes the same steps 4..6.
  Accelerator resumed(small_run(c));
  resumed.load_state(step3);
  EXPECT_EQ(resumed.global_step(), 3);
  const LoopResult rr = custom_loop(resumed, 6, [](int64_t) {});
  ASSERT_EQ(rr.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rr.losses[i], full.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(weight_bytes(resumed.model()), weight_bytes(acc.model()));
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove_all(c);
}

TEST(Accelerator, SaveStateMidAccumulationIsAnError) {
  const fs::path a = temp_dir("midwindow");
  Accelerator acc(small_run(a));
  acc.backward(acc.next_batch());  // 1 of 2 micro-batches
  EXPECT_FALSE(acc.is_accumulation_boundary());
  try {
    acc.save_state();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::strstr(e.what(), "save after step()"), nullptr) << e.what();
  }
  fs::remove_all(a);
}

TEST(Accelerator, Fp16OverflowSkipsTheStepLikeRunTraining) {
  // A loss scale of 2^18 overflows this run's fp16 gradients (2^17 fits): steps are
  // skipped, the scale halving once the hysteresis is used up, until it fits. A skipped
  // step is a global step in both loops (DeepSpeed's global_steps).
  const std::vector<std::string> fp16{"--fp16", "true", "--fp16.initial_scale_power", "18", "--max_steps", "6"};
  const fs::path a = temp_dir("fp16_trainer"), b = temp_dir("fp16_api");
  const train::TrainResult full = train::run_training(small_run(a, fp16));
  ASSERT_GT(full.skipped_steps, 1);
  ASSERT_LT(full.skipped_steps, 6) << "the run must also apply updates";

  Accelerator acc(small_run(b, fp16));
  EXPECT_EQ(acc.loss_scale(), std::ldexp(1.0f, 18));
  const std::string before = weight_bytes(acc.model());
  double first_loss = acc.backward(acc.next_batch());
  first_loss += acc.backward(acc.next_batch());
  ASSERT_TRUE(acc.sync_gradients());
  EXPECT_FALSE(std::isfinite(acc.clip_grad_norm(acc.max_grad_norm())));
  EXPECT_FALSE(acc.step());
  acc.zero_grad();
  EXPECT_EQ(acc.global_step(), 1);
  EXPECT_EQ(acc.optimizer_steps(), 0);
  EXPECT_EQ(acc.skipped_steps(), 1);
  EXPECT_EQ(weight_bytes(acc.model()), before) << "a skipped step changed the weights";

  const LoopResult r = custom_loop(acc, acc.max_steps(), [](int64_t) {});
  EXPECT_EQ(acc.global_step(), 6);
  EXPECT_EQ(r.skipped + 1, full.skipped_steps);
  EXPECT_EQ(acc.skipped_steps(), full.skipped_steps);
  EXPECT_EQ(acc.optimizer_steps(), full.optimizer_steps);
  std::vector<double> losses{first_loss / 2.0};
  losses.insert(losses.end(), r.losses.begin(), r.losses.end());
  ASSERT_EQ(losses.size(), full.losses.size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], full.losses[i]) << "step " << i + 1;
  EXPECT_LT(acc.loss_scale(), std::ldexp(1.0f, 18));
  acc.save_pretrained((b / "final").string());
  EXPECT_EQ(file_bytes(b / "final" / "model.safetensors"),
            file_bytes(fs::path(full.final_model_dir) / "model.safetensors"));
  fs::remove_all(a);
  fs::remove_all(b);
}
