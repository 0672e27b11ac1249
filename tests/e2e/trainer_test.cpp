// The trainer end to end on CPU: a resumed run continues bitwise identically (losses and
// final weights) to an uninterrupted one; fp16 runs with the loss scaler; SIGINT saves a
// checkpoint and exits 0; the final model directory loads back.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "train/run_config.h"
#include "train/trainer.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

// This file's named scratch directories: build/test_tmp/trainer_<name>_<pid>, emptied first.
fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("trainer_", name); }

using zt::testing::small_run;
using zt::testing::file_bytes;

}  // namespace

TEST(Trainer, ResumedRunIsBitwiseIdenticalToAnUninterruptedOne) {
  const fs::path a = temp_dir("a"), b = temp_dir("b");
  const train::TrainResult full = train::run_training(small_run(a));
  ASSERT_EQ(full.steps, 6);
  ASSERT_EQ(full.losses.size(), 6u);
  EXPECT_LT(full.losses.back(), full.losses.front());
  const fs::path step3 = a / "run" / "checkpoints" / "global_step3";
  ASSERT_TRUE(fs::exists(step3 / "manifest.json"));

  const train::TrainResult resumed = train::run_training(small_run(b, {"--resume", step3.string()}));
  ASSERT_EQ(resumed.steps, 6);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(resumed.final_val_loss, full.final_val_loss);
  // The final weights are the same bytes.
  EXPECT_EQ(file_bytes(fs::path(full.final_model_dir) / "model.safetensors"),
            file_bytes(fs::path(resumed.final_model_dir) / "model.safetensors"));
  // The final directory is an HF model that loads back.
  const model::Pretrained p = model::load_pretrained(full.final_model_dir);
  EXPECT_EQ(p.config.model_type, "gpt2");
  EXPECT_TRUE(fs::exists(fs::path(full.final_model_dir) / "tokenizer.json"));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, Fp16RunsWithTheDynamicLossScaler) {
  const fs::path a = temp_dir("fp16");
  const train::TrainResult r = train::run_training(small_run(a, {"--fp16", "true", "--max_steps", "4"}));
  EXPECT_EQ(r.steps, 4);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  std::ifstream metrics(a / "run" / "metrics.jsonl");
  std::string first;
  std::getline(metrics, first);
  EXPECT_NE(first.find("\"loss_scale\":65536"), std::string::npos) << first;
  fs::remove_all(a);
}

// A loss scale so large that the scaled gradients' sum of squares overflows: those steps are
// skipped (no optimizer or lr step, grad_norm null in metrics.jsonl), the scale halves on
// each (hysteresis 1) until steps go through, and the run still takes max_steps steps.
TEST(Trainer, Fp16OverflowSkipsStepsAndHalvesTheScale) {
  const fs::path a = temp_dir("fp16_overflow");
  const train::TrainResult r = train::run_training(small_run(
      a, {"--fp16", "true", "--fp16.initial_scale_power", "21", "--fp16.hysteresis", "1", "--max_steps", "3",
          "--steps_per_print", "1"}));
  EXPECT_EQ(r.steps, 3);
  EXPECT_GE(r.skipped_steps, 1);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  std::ifstream metrics(a / "run" / "metrics.jsonl");
  int skipped = 0, taken = 0;
  double last_scale = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("loss_scale")) continue;
    const bool skip = j.at("skipped").get<bool>();
    skipped += skip;
    taken += !skip;
    EXPECT_EQ(j.at("grad_norm").is_null(), skip) << line;
    if (!skip) {
      EXPECT_TRUE(std::isfinite(j.at("grad_norm").get<double>())) << line;
    }
    last_scale = j.at("loss_scale").get<double>();
  }
  EXPECT_EQ(skipped, r.skipped_steps);
  EXPECT_EQ(taken, 3);
  EXPECT_LT(last_scale, std::ldexp(1.0, 21));
  fs::remove_all(a);
}

TEST(Trainer, SigintSavesACheckpointAndExitsZero) {
  const fs::path a = temp_dir("sigint");
  const std::string exe = std::string(ZT_BINARY_DIR) + "/zerotrain";
  if (!fs::exists(exe)) GTEST_SKIP() << "zerotrain executable not built";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string out = (a / "run").string();
    const std::string log = (a / "log.txt").string();
    if (!std::freopen(log.c_str(), "w", stdout) || !std::freopen(log.c_str(), "a", stderr)) ::_exit(126);
    ::execl(exe.c_str(), exe.c_str(), "train", "--max_steps", "100000", "--output_dir", out.c_str(),
            "--steps_per_print", "1", "--threads", "1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until training has started (a step line), then interrupt.
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(a / "log.txt");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.find("step      2/") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::ifstream latest(a / "run" / "checkpoints" / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name.rfind("global_step", 0), 0u) << name;
  EXPECT_TRUE(fs::exists(a / "run" / "checkpoints" / name / "manifest.json"));
  fs::remove_all(a);
}
