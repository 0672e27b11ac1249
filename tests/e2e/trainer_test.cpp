// The trainer end to end on CPU: a resumed run continues bitwise identically (losses and
// final weights) to an uninterrupted one; fp16 runs with the loss scaler; SIGINT saves a
// checkpoint and exits 0; the final model directory loads back.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/input_error.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/safetensors.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"
#include "model/hf_dir.h"
#include "train/lr_schedule.h"
#include "config/run_config.h"
#include "train/trainer.h"
#include "train/training_run.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

// This file's named scratch directories: build/test_tmp/trainer_<name>_<pid>, emptied first.
fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("trainer_", name); }

using zt::testing::file_bytes;
using zt::testing::input_error_of;
using zt::testing::small_run;

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

// One process: stages 1-3 run as stage 0 (train::engine_stage), with stage 0's losses and
// final weights bit for bit, and say so; ZT_ZERO_KEEP_STAGE=1 keeps stage 3's partitioned
// machinery, whose f32 sums over one rank are the same numbers.
TEST(Trainer, OneProcessRunsEveryStageAsStageZero) {
  EXPECT_EQ(train::engine_stage(3, 1), 0);
  EXPECT_EQ(train::engine_stage(2, 1), 0);
  EXPECT_EQ(train::engine_stage(0, 1), 0);
  EXPECT_EQ(train::engine_stage(3, 2), 3);
  EXPECT_EQ(train::engine_stage(1, 4), 1);

  const fs::path s0 = temp_dir("stage0"), s3 = temp_dir("stage3"), kept = temp_dir("stage3_kept");
  const std::vector<std::string> shorter{"--max_steps", "3", "--save_interval", "0", "--eval_interval", "0"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), shorter.begin(), shorter.end());
    return extra;
  };
  const train::TrainResult r0 = train::run_training(small_run(s0, with({})));
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const train::TrainResult r3 = train::run_training(small_run(s3, with({"--zero_optimization.stage", "3"})));
  const std::string log = ::testing::internal::GetCapturedStdout() + ::testing::internal::GetCapturedStderr();
  ::setenv("ZT_ZERO_KEEP_STAGE", "1", 1);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const train::TrainResult rk = train::run_training(small_run(kept, with({"--zero_optimization.stage", "3"})));
  const std::string kept_log = ::testing::internal::GetCapturedStdout() + ::testing::internal::GetCapturedStderr();
  ::unsetenv("ZT_ZERO_KEEP_STAGE");

  ASSERT_EQ(r0.losses.size(), 3u);
  EXPECT_EQ(r3.losses, r0.losses);
  EXPECT_EQ(file_bytes(fs::path(r3.final_model_dir) / "model.safetensors"),
            file_bytes(fs::path(r0.final_model_dir) / "model.safetensors"));
  EXPECT_NE(log.find("ZeRO stage 0 over 1 rank"), std::string::npos) << log;
  EXPECT_NE(log.find("zero_optimization.stage 3: accepted but has no effect here"), std::string::npos) << log;
  EXPECT_NE(log.find("runs as stage 0"), std::string::npos) << log;
  // The kept stage 3 really ran partitioned, to the same losses.
  EXPECT_NE(kept_log.find("ZeRO stage 3 over 1 rank"), std::string::npos) << kept_log;
  ASSERT_EQ(rk.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(rk.losses[i], r0.losses[i], 1e-6 * r0.losses[i]) << "step " << i + 1;
  for (const fs::path& p : {s0, s3, kept}) fs::remove_all(p);
}

// save_strategy: no (HF's) writes no checkpoint, during the run or at its end, and still
// the final model; a value other than steps/no is a config error naming the key.
TEST(Trainer, SaveStrategyNoWritesNoCheckpoint) {
  const fs::path a = temp_dir("save_no");
  const train::TrainResult r = train::run_training(small_run(a, {"--max_steps", "3", "--save_strategy", "no"}));
  EXPECT_EQ(r.steps, 3);
  EXPECT_TRUE(r.last_checkpoint.empty()) << r.last_checkpoint;
  EXPECT_FALSE(fs::exists(a / "run" / "checkpoints" / "latest"));
  EXPECT_FALSE(fs::exists(a / "run" / "checkpoints" / "global_step3"));
  EXPECT_TRUE(fs::exists(fs::path(r.final_model_dir) / "model.safetensors"));
  try {
    small_run(a, {"--save_strategy", "never"});
    ADD_FAILURE() << "save_strategy never was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("save_strategy"), std::string::npos) << e.what();
  }
  fs::remove_all(a);
}

// Issue 15's case: a second run into the same output_dir whose tokenizer has another file
// name left the first run's tokenizer.json in final/ (written after final/ was committed),
// so HF tools loaded the wrong one. Now final/ holds the second run's tokenizer, whole.
TEST(Trainer, ASecondRunWithAnotherTokenizerFileLeavesOnlyItsOwnInFinal) {
  const fs::path a = temp_dir("two_tokenizers");
  const train::TrainResult first = train::run_training(small_run(a, {"--max_steps", "2"}));
  const fs::path final_dir(first.final_model_dir);
  const std::string text = "This License";
  const std::vector<int32_t> first_ids = io::load_tokenizer((final_dir / "tokenizer.json").string())->encode(text);

  io::BpeTrainOptions o;
  o.vocab_size = 400;  // another tokenizer: other merges, other ids
  const fs::path other = a / "other_tok.json";
  std::ofstream(other) << io::train_bpe_tokenizer_json(
      {io::read_text_file(std::string(ZT_SOURCE_DIR) + "/data/text/gpl-3.txt")}, o);
  const std::vector<int32_t> other_ids = io::load_tokenizer(other.string())->encode(text);
  ASSERT_NE(other_ids, first_ids);

  const train::TrainResult second = train::run_training(
      small_run(a, {"--max_steps", "2", "--overwrite_output_dir", "true", "--model.tokenizer", other.string()}));
  ASSERT_EQ(second.final_model_dir, first.final_model_dir);
  EXPECT_EQ(io::load_tokenizer((final_dir / "tokenizer.json").string())->encode(text), other_ids);
  // Under HF's name only, as save_pretrained writes it, with its tokenizer_config.json.
  EXPECT_FALSE(fs::exists(final_dir / "other_tok.json"));
  EXPECT_TRUE(fs::exists(final_dir / "tokenizer_config.json"));
  fs::remove_all(a);
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

namespace {

// The metrics.jsonl records of training steps (those with a loss scale), in order.
std::vector<nlohmann::json> step_records(const fs::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream metrics(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_TRUE(j.contains("skipped") && j.at("skipped").is_boolean()) << "every record says skipped: " << line;
    if (j.contains("loss_scale")) out.push_back(std::move(j));
  }
  return out;
}

size_t count_of(const std::string& text, const std::string& piece) {
  size_t n = 0;
  for (size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 1)) ++n;
  return n;
}

}  // namespace

// DeepSpeed's skipped-step semantics. A loss scale of 2^21 overflows this run's fp16
// gradients (the scaled sum of squares): with hysteresis 1 the scale halves on every
// overflow, and a later batch may overflow again. Each skipped step is still a global step
// (global_steps += 1 and skipped_steps += 1): the run takes exactly max_steps steps, N of
// them skipped, max_steps - N optimizer updates and LR-schedule steps; step numbers never
// repeat; checkpoints and evaluation follow the global step even on a skipped step, and a
// run resumed from a checkpoint saved at a skipped step continues bitwise identically.
TEST(Trainer, Fp16OverflowSkippedStepsCountAsGlobalSteps) {
  const fs::path a = temp_dir("fp16_overflow"), b = temp_dir("fp16_overflow_resumed");
  const int kPower = 21;
  const std::vector<std::string> fp16{
      "--fp16", "true", "--fp16.initial_scale_power", std::to_string(kPower), "--fp16.hysteresis", "1"};
  ::testing::internal::CaptureStdout();
  const train::TrainResult r = train::run_training(small_run(a, fp16));
  const std::string log = ::testing::internal::GetCapturedStdout();
  const int64_t N = r.skipped_steps;
  ASSERT_EQ(r.steps, 6) << log;
  ASSERT_GE(N, 3) << log;
  ASSERT_LT(N, 6) << log;
  EXPECT_EQ(r.optimizer_steps, 6 - N);
  ASSERT_EQ(r.losses.size(), 6u);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));

  // One record per global step, numbered 1..6 (with this data: steps 1-3 and 5 skipped);
  // the scale halves after each skip and holds after an applied step; grad_norm is null
  // exactly on skipped steps.
  const std::vector<nlohmann::json> rec = step_records(a / "run");
  ASSERT_EQ(rec.size(), 6u);
  ASSERT_TRUE(rec[2].at("skipped").get<bool>()) << "the test needs step 3 (a checkpoint step) skipped:\n" << log;
  const std::unique_ptr<train::LrSchedule> schedule = train::make_hf_schedule("cosine", 3.0e-3f, 2, 6);
  int64_t applied = 0, skipped = 0, applied_by_3 = 0;
  double scale = std::ldexp(1.0, kPower);
  for (size_t i = 0; i < rec.size(); ++i) {
    const nlohmann::json& j = rec[i];
    const bool skip = j.at("skipped").get<bool>();
    EXPECT_EQ(j.at("step").get<int64_t>(), static_cast<int64_t>(i) + 1);
    EXPECT_EQ(j.at("grad_norm").is_null(), skip) << j;
    EXPECT_EQ(j.at("loss_scale").get<double>(), scale) << j;
    // The lr of a step is the schedule at the updates applied before it: skipped steps do
    // not advance it.
    EXPECT_FLOAT_EQ(j.at("lr").get<float>(), schedule->lr(applied)) << j;
    applied += !skip;
    skipped += skip;
    EXPECT_EQ(j.at("skipped_steps").get<int64_t>(), skipped) << j;
    if (skip) scale /= 2;
    if (i == 2) applied_by_3 = applied;
  }
  EXPECT_EQ(skipped, N);
  EXPECT_EQ(applied, 6 - N);

  // The log: each step line once, the skipped ones counting.
  for (int s = 1; s <= 6; ++s) EXPECT_EQ(count_of(log, "step      " + std::to_string(s) + "/6 | loss"), 1u) << log;
  for (int64_t k = 1; k <= N; ++k)
    EXPECT_EQ(count_of(log, "overflow: skipped (" + std::to_string(k) + " so far)"), 1u) << log;
  EXPECT_EQ(count_of(log, "skipped ("), static_cast<size_t>(N)) << log;

  // Checkpoints at the save_interval steps (3 was skipped) and the final model, and the
  // counters they hold: global step, optimizer steps, skipped steps.
  const fs::path step3 = a / "run" / "checkpoints" / "global_step3";
  ASSERT_TRUE(fs::exists(step3 / "manifest.json"));
  ASSERT_TRUE(fs::exists(a / "run" / "checkpoints" / "global_step6" / "manifest.json"));
  EXPECT_TRUE(fs::exists(fs::path(r.final_model_dir) / "model.safetensors"));
  const nlohmann::json m3 = nlohmann::json::parse(file_bytes(step3 / "manifest.json"));
  EXPECT_EQ(m3.at("step").get<int64_t>(), 3);
  EXPECT_EQ(m3.at("extra").at("optimizer_steps").get<int64_t>(), applied_by_3);
  EXPECT_EQ(m3.at("loss_scaler").at("skipped_steps").get<int64_t>(), 3 - applied_by_3);

  // Resumed at the skipped step 3: the same steps 4..6, bit for bit.
  const train::TrainResult resumed = train::run_training(small_run(b, [&] {
    std::vector<std::string> v = fp16;
    v.insert(v.end(), {"--resume", step3.string()});
    return v;
  }()));
  EXPECT_EQ(resumed.steps, 6);
  EXPECT_EQ(resumed.skipped_steps, N);
  EXPECT_EQ(resumed.optimizer_steps, 6 - N);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], r.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(file_bytes(fs::path(r.final_model_dir) / "model.safetensors"),
            file_bytes(fs::path(resumed.final_model_dir) / "model.safetensors"));
  fs::remove_all(a);
  fs::remove_all(b);
}

// wall_clock_breakdown and memory_breakdown act: the log gets DeepSpeed's per-step
// `time (ms) | fwd | bwd | step` line and a memory-by-category line at every log step
// (and memory once at the start), and metrics.jsonl records carry the same numbers.
// Accepted keys that do nothing here (ZeRO stage 2 and communication_data_type with one
// process) say so once each. Timing does not change the numbers.
TEST(Trainer, WallClockAndMemoryBreakdownsAreReported) {
  const fs::path a = temp_dir("breakdown"), b = temp_dir("breakdown_off");
  const std::vector<std::string> common{
      "--max_steps", "2", "--zero_optimization.stage", "2", "--communication_data_type", "bf16"};
  std::vector<std::string> on = common;
  on.insert(on.end(), {"--wall_clock_breakdown", "true", "--memory_breakdown", "true"});
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const train::TrainResult r = train::run_training(small_run(a, on));
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string log = out + err;
  ASSERT_EQ(r.steps, 2);
  EXPECT_EQ(count_of(log, "time (ms/step, mean of 1) | fwd: "), 2u) << log;
  EXPECT_EQ(count_of(log, " | bwd: "), 2u) << log;
  EXPECT_EQ(count_of(log, " | step: "), 2u) << log;
  EXPECT_EQ(count_of(log, " | comm: "), 2u) << log;
  EXPECT_EQ(count_of(log, "memory | parameters "), 3u) << "at the start and at both log steps:\n" << log;
  for (const char* part : {" | gradients ", " | optimizer state ", " | activations and other, peak ", " | host RSS "})
    EXPECT_EQ(count_of(log, part), 3u) << part << "\n" << log;
  EXPECT_EQ(count_of(log, "zero_optimization.stage 2: accepted but has no effect here"), 1u) << log;
  EXPECT_EQ(count_of(log, "communication_data_type: accepted but has no effect here"), 1u) << log;
  EXPECT_NE(log.find("MFU against "), std::string::npos) << log;
  EXPECT_NE(log.find("(CPU: "), std::string::npos) << log;

  const std::vector<nlohmann::json> rec = step_records(a / "run");
  ASSERT_EQ(rec.size(), 2u);
  for (const nlohmann::json& j : rec) {
    const nlohmann::json& t = j.at("time_ms");
    for (const char* k : {"fwd", "bwd", "step", "comm"}) EXPECT_GE(t.at(k).get<double>(), 0.0) << j;
    EXPECT_GT(t.at("fwd").get<double>(), 0.0) << j;
    EXPECT_GT(t.at("bwd").get<double>(), 0.0) << j;
    EXPECT_GT(t.at("step").get<double>(), 0.0) << j;
    const nlohmann::json& m = j.at("memory");
    EXPECT_GT(m.at("params_bytes").get<int64_t>(), 0) << j;
    EXPECT_GT(m.at("grads_bytes").get<int64_t>(), 0) << j;
    EXPECT_GT(m.at("optimizer_bytes").get<int64_t>(), 0) << j;
    EXPECT_GT(m.at("host_peak_rss_bytes").get<int64_t>(), 0) << j;
  }
  // Off: no reports, and the same losses bit for bit.
  ::testing::internal::CaptureStdout();
  const train::TrainResult off = train::run_training(small_run(b, common));
  const std::string off_log = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(off_log.find("time (ms"), std::string::npos) << off_log;
  EXPECT_EQ(off_log.find("memory | "), std::string::npos) << off_log;
  EXPECT_FALSE(step_records(b / "run").at(0).contains("time_ms"));
  EXPECT_EQ(off.losses, r.losses);
  fs::remove_all(a);
  fs::remove_all(b);
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

// model.config (issue 19): a 2-layer GPT-2 with GPT-2's 50257-token vocabulary, from its
// config.json alone, trains (random init, as AutoModelForCausalLM.from_config), and final/
// is that shape; the final model loads back. A config.json that does not exist is exit 2.
TEST(Trainer, AModelFromAConfigJsonTrainsInThatShape) {
  const fs::path a = temp_dir("from_config");
  fs::create_directories(a);
  std::ofstream(a / "config.json") << R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2,
    "n_head": 2, "n_embd": 64, "n_positions": 128, "vocab_size": 50257, "bos_token_id": 50256, "eos_token_id": 50256})";
  const train::TrainResult r = train::run_training(
      small_run(a, {"--model.preset", "", "--model.config", (a / "config.json").string(), "--model.tokenizer",
                    std::string(ZT_SOURCE_DIR) + "/tests/data/gpt2", "--max_steps", "12", "--save_strategy", "no",
                    "--eval_interval", "0"}));
  ASSERT_EQ(r.losses.size(), 12u);
  EXPECT_LT(r.losses.back(), r.losses.front() - 0.5) << "the loss falls from ln(50257) ~ 10.8";
  {  // Each step record has the elapsed time and the ETA (the step line shows them too).
    const std::vector<nlohmann::json> rec = step_records(a / "run");
    ASSERT_EQ(rec.size(), 12u);
    EXPECT_EQ(rec.back().at("eta_s").get<double>(), 0.0);
    EXPECT_GT(rec.front().at("eta_s").get<double>(), 0.0);
    EXPECT_GE(rec.back().at("elapsed_s").get<double>(), rec.front().at("elapsed_s").get<double>());
  }
  const model::ModelConfig final_config = model::load_hf_config(r.final_model_dir);
  EXPECT_EQ(final_config.num_layers, 2);
  EXPECT_EQ(final_config.hidden_size, 64);
  EXPECT_EQ(final_config.vocab_size, 50257);
  EXPECT_NO_THROW(model::load_pretrained(r.final_model_dir));
  try {
    train::run_training(small_run(a, {"--model.preset", "", "--model.config", (a / "missing.json").string(),
                                      "--overwrite_output_dir"}));
    ADD_FAILURE() << "a missing config.json was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos) << e.what();
  }
  // Said before the output directory is touched: the previous run's final/ is still there.
  EXPECT_TRUE(fs::exists(fs::path(r.final_model_dir) / "model.safetensors"));
  fs::remove_all(a);
}

// HF's data_seed and per_device_eval_batch_size (issue 19 item 8): data_seed orders the
// batches alone (the weights' init keeps seed), and data_seed = seed is the run without
// it; an evaluation of 1 batch of 8 sequences sees the same 8 windows as 8 batches of 1.
TEST(Trainer, DataSeedAndEvalBatchSizeAsHfMeansThem) {
  const fs::path a = temp_dir("data_seed");
  const auto run = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--max_steps", "2", "--save_strategy", "no", "--overwrite_output_dir"});
    return train::run_training(small_run(a, extra));
  };
  const train::TrainResult plain = run({});
  const train::TrainResult same = run({"--data_seed", "7"});  // small_run's seed is 7
  const train::TrainResult other = run({"--data_seed", "8"});
  EXPECT_EQ(plain.losses, same.losses);
  EXPECT_NE(plain.losses.front(), other.losses.front()) << "another data order gives other first batches";
  const train::TrainResult b8 = run({"--per_device_eval_batch_size", "8", "--eval_batches", "1"});
  const train::TrainResult b1 = run({"--per_device_eval_batch_size", "1", "--eval_batches", "8"});
  ASSERT_TRUE(std::isfinite(b8.final_val_loss));
  EXPECT_NEAR(b8.final_val_loss, b1.final_val_loss, 1e-5 * b8.final_val_loss);
  fs::remove_all(a);
}

// Validation data shorter than one batch (a small validation_fraction split at a long
// seq_len) is evaluated as one batch of the windows it has, as HF evaluates a short eval
// set, instead of failing the run at its end after all its training; data that makes no
// window at all is settled before training: an error when the run asked for it
// (data.validation), a warning and no validation loss for the default split.
TEST(Trainer, ShortValidationDataIsEvaluatedAndNoWindowIsSaidBeforeTraining) {
  const fs::path a = temp_dir("short_validation");
  std::string few;  // about 85 tokens: 2 windows of 33, fewer than the batch of 4
  for (int i = 0; i < 3; ++i) few += "The quick brown fox jumps over the lazy dog. ";
  std::ofstream(a / "few.txt") << few;
  std::ofstream(a / "none.txt") << "Hello.";
  const auto run = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--max_steps", "2", "--save_strategy", "no", "--overwrite_output_dir"});
    return train::run_training(small_run(a, extra));
  };
  const train::TrainResult short_batch = run({"--data.validation", "['" + (a / "few.txt").string() + "']"});
  ASSERT_TRUE(std::isfinite(short_batch.final_val_loss));
  const int64_t windows = io::count_windows({(a / "run" / "data_validation" / "train_000000.bin").string()}, 32,
                                            io::SampleWindows::Packed);
  ASSERT_GT(windows, 0);
  ASSERT_LT(windows, 4) << "the validation data must be shorter than one batch of 4";
  // the same windows one at a time (eval_batches 8 takes every one there is)
  const train::TrainResult one_by_one = run({"--data.validation", "['" + (a / "few.txt").string() + "']",
                                             "--per_device_eval_batch_size", "1", "--eval_batches", "8"});
  EXPECT_NEAR(short_batch.final_val_loss, one_by_one.final_val_loss, 1e-5 * short_batch.final_val_loss);

  fs::remove_all(a / "run");
  const std::string e =
      input_error_of([&] { run({"--data.validation", "['" + (a / "none.txt").string() + "']"}); });
  EXPECT_NE(e.find("makes no window of 33 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("data.seq_len"), std::string::npos) << e;
  EXPECT_NE(e.find("none.txt"), std::string::npos) << "names the user's file: " << e;
  EXPECT_FALSE(fs::exists(a / "run" / "metrics.jsonl")) << "said before the first step";

  // The default split: the second of two documents (validation_fraction 0.5) is too short.
  const train::TrainResult no_val = run({"--data.train",
                                         "['" + std::string(ZT_SOURCE_DIR) + "/data/text/artistic.txt', '" +
                                             (a / "none.txt").string() + "']"});
  EXPECT_TRUE(std::isnan(no_val.final_val_loss));
  EXPECT_EQ(no_val.losses.size(), 2u);
  fs::remove_all(a);
}

// HF's eval_strategy and save_strategy "epoch" (issue 19 item 8): the run's 6 steps over
// data whose epoch is E steps evaluate and save at steps E, 2E, ... and at the end;
// eval_strategy "no" never evaluates (evaluation_strategy is its older spelling).
TEST(Trainer, EpochStrategiesEvaluateAndSaveAtEveryEpochEnd) {
  const fs::path a = temp_dir("epoch_strategy");
  const train::TrainResult r = train::run_training(
      small_run(a, {"--eval_strategy", "epoch", "--save_strategy", "epoch", "--max_steps", "6", "--keep_last", "20",
                    "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "3"}));
  std::vector<int64_t> evaluated, saved;
  {
    std::ifstream metrics(a / "run" / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("val_loss")) evaluated.push_back(j.at("step").get<int64_t>());
    }
  }
  for (int64_t s = 1; s <= 6; ++s)
    if (fs::exists(a / "run" / "checkpoints" / ("global_step" + std::to_string(s)))) saved.push_back(s);
  // The run's epoch length, as the trainer computes it (a fresh run over the same data).
  const int64_t E = train::start_training_run(small_run(a, {"--overwrite_output_dir", "--per_device_train_batch_size",
                                                             "8", "--gradient_accumulation_steps", "3"}))
                        ->steps_per_epoch;
  ASSERT_GE(E, 1);
  ASSERT_LT(E, 6) << "the test needs an epoch shorter than the run";
  std::vector<int64_t> expected;
  for (int64_t s = E; s <= 6; s += E) expected.push_back(s);
  if (expected.back() != 6) expected.push_back(6);
  EXPECT_EQ(evaluated, expected) << "steps per epoch " << E;
  EXPECT_EQ(saved, expected) << "steps per epoch " << E;
  const train::TrainResult none = train::run_training(
      small_run(a, {"--evaluation_strategy", "no", "--max_steps", "3", "--overwrite_output_dir"}));
  EXPECT_TRUE(std::isnan(none.final_val_loss) || none.final_val_loss == 0) << none.final_val_loss;
  fs::remove_all(a);
}

// HF's load_best_model_at_end and EarlyStoppingCallback (issue 19 item 8). With
// greater_is_better the best evaluation of a run whose loss falls is its first (step 2),
// so final/ is global_step2's model: bitwise the final/ of a run that stopped at step 2
// (constant lr, so the runs share steps 1-2), and rotation (keep_last 1) keeps global_step2.
// Patience 1 stops the run at the next evaluation that does not improve (step 4).
TEST(Trainer, LoadBestModelAtEndAndEarlyStopping) {
  const fs::path a = temp_dir("best_model");
  const std::vector<std::string> common = {"--lr_scheduler_type", "constant", "--warmup_steps", "0", "--eval_interval",
                                           "2", "--save_interval", "2", "--overwrite_output_dir"};
  const auto run = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return train::run_training(small_run(a, extra));
  };
  const train::TrainResult two = run({"--max_steps", "2"});
  const std::string two_final = file_bytes(fs::path(two.final_model_dir) / "model.safetensors");
  const train::TrainResult best = run({"--max_steps", "6", "--load_best_model_at_end", "true", "--greater_is_better",
                                       "true", "--keep_last", "1"});
  EXPECT_EQ(best.steps, 6);
  EXPECT_EQ(best.best_step, 2);
  EXPECT_FALSE(best.early_stopped);
  EXPECT_TRUE(fs::exists(a / "run" / "checkpoints" / "global_step2")) << "the best checkpoint survives rotation";
  EXPECT_TRUE(fs::exists(a / "run" / "checkpoints" / "global_step6"));
  EXPECT_FALSE(fs::exists(a / "run" / "checkpoints" / "global_step4"));
  EXPECT_EQ(file_bytes(fs::path(best.final_model_dir) / "model.safetensors"), two_final)
      << "final/ is the best checkpoint's model";
  const train::TrainResult stopped = run({"--max_steps", "6", "--load_best_model_at_end", "true",
                                          "--greater_is_better", "true", "--early_stopping_patience", "1"});
  EXPECT_TRUE(stopped.early_stopped);
  EXPECT_EQ(stopped.steps, 4);
  EXPECT_EQ(file_bytes(fs::path(stopped.final_model_dir) / "model.safetensors"), two_final);
  // HF's checks: the strategies must match, save_steps a multiple of eval_steps.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--load_best_model_at_end", "true", "--eval_interval", "2", "--save_interval", "3"},
        {"--load_best_model_at_end", "true", "--save_strategy", "no"},
        {"--early_stopping_patience", "2", "--eval_strategy", "no"}}) {
    try {
      small_run(a, bad);
      ADD_FAILURE() << bad[0] << " " << bad[2] << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
    }
  }
  fs::remove_all(a);
}

// report_to: tensorboard (issue 19 item 6) writes an event file under output_dir/runs (or
// logging_dir) with one train/loss scalar per step line and the validation losses; the
// format itself is checked by tests/unit/tensorboard_test.cpp.
TEST(Trainer, ReportToTensorboardWritesEventFiles) {
  const fs::path a = temp_dir("tensorboard");
  const train::TrainResult r = train::run_training(small_run(a, {"--report_to", "tensorboard"}));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(a / "run" / "runs")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const std::string bytes = file_bytes(files[0]);
  // The tag, then simple_value's key (0x15): train/loss, not train/loss_scale.
  EXPECT_EQ(count_of(bytes, std::string("train/loss") + '\x15'), r.losses.size());  // steps_per_print 1
  EXPECT_EQ(count_of(bytes, "eval/loss"), 2u);                // eval_interval 3 over 6 steps
  EXPECT_EQ(count_of(bytes, "brain.Event:2"), 1u);
  const train::TrainResult other = train::run_training(small_run(
      a, {"--report_to", "all", "--logging_dir", (a / "tb").string(), "--max_steps", "2", "--overwrite_output_dir"}));
  EXPECT_FALSE(fs::is_empty(a / "tb"));
  // DeepSpeed's tensorboard section: output_path/job_name, DeepSpeed's tags.
  std::ofstream(a / "ds.json") << R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "train_batch_size": "auto", "tensorboard": {"enabled": true,
      "output_path": ")" << (a / "dslogs").string() << R"(", "job_name": "job"}})";
  train::run_training(small_run(
      a, {"--deepspeed", (a / "ds.json").string(), "--max_steps", "2", "--overwrite_output_dir"}));
  std::vector<fs::path> ds_files;
  for (const auto& e : fs::directory_iterator(a / "dslogs" / "job")) ds_files.push_back(e.path());
  ASSERT_EQ(ds_files.size(), 1u);
  EXPECT_EQ(count_of(file_bytes(ds_files[0]), "Train/Samples/train_loss"), 2u);
  fs::remove_all(a);
}

// DeepSpeed's csv_monitor: one CSV per tag in output_path/job_name, `step,<name>` then a row
// per logged step against the samples seen (small_run: 1 rank x micro-batch 2 x gas 1...),
// appended to by a resumed run without a second header.
TEST(Trainer, CsvMonitorWritesDeepSpeedsFiles) {
  const fs::path a = temp_dir("csv_monitor");
  fs::create_directories(a);
  std::ofstream(a / "ds.json") << R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "train_batch_size": "auto", "csv_monitor": {"enabled": true,
      "output_path": ")" << (a / "csv").string() << R"(", "job_name": "job"}})";
  const train::TrainResult r =
      train::run_training(small_run(a, {"--deepspeed", (a / "ds.json").string(), "--max_steps", "4"}));
  const fs::path loss_csv = a / "csv" / "job" / "Train_Samples_train_loss.csv";
  const std::string text = file_bytes(loss_csv);
  EXPECT_TRUE(fs::exists(a / "csv" / "job" / "Train_Samples_lr.csv"));
  EXPECT_EQ(text.rfind("step,train_loss\n", 0), 0u) << text;
  EXPECT_EQ(count_of(text, "\n"), 1 + r.losses.size()) << text;  // steps_per_print 1
  // The first row: the samples after step 1 and step 1's loss, read back exactly.
  std::istringstream rows(text.substr(text.find('\n') + 1));
  long long samples = 0;
  char comma = 0;
  double loss = 0;
  rows >> samples >> comma >> loss;
  EXPECT_GT(samples, 0);
  EXPECT_EQ(loss, r.losses.front());
  // A resumed run appends its rows to the same files (no second header).
  train::run_training(small_run(a, {"--deepspeed", (a / "ds.json").string(), "--max_steps", "6", "--resume",
                                    "latest"}));
  const std::string more = file_bytes(loss_csv);
  EXPECT_EQ(count_of(more, "step,"), 1u) << more;
  EXPECT_GT(count_of(more, "\n"), count_of(text, "\n"));
  fs::remove_all(a);
}

// Fine-tuning an HF directory keeps what HF keeps (issue 19 item 1): a Llama-3-style
// eos_token_id list ([1, 2]) stays a list in final/config.json, and the source's
// generation_config.json is carried over byte for byte.
TEST(Trainer, FineTuningKeepsTheEosListAndTheGenerationConfig) {
  const fs::path a = temp_dir("eos_list");
  fs::create_directories(a);
  const std::string source = std::string(ZT_SOURCE_DIR) + "/tests/data/hf/llama3";
  io::BpeTrainOptions o;
  o.vocab_size = 300;  // fits the fixture's 320 rows
  std::ofstream(a / "tok.json") << io::train_bpe_tokenizer_json(
      {io::read_text_file(std::string(ZT_SOURCE_DIR) + "/data/text/artistic.txt")}, o);
  const train::TrainResult r = train::run_training(
      small_run(a, {"--model.preset", "", "--model.path", source, "--model.tokenizer", (a / "tok.json").string(),
                    "--max_steps", "2", "--save_strategy", "no"}));
  std::ifstream cfg(fs::path(r.final_model_dir) / "config.json");
  const nlohmann::json j = nlohmann::json::parse(cfg);
  EXPECT_EQ(j.at("eos_token_id"), nlohmann::json::array({1, 2})) << j.dump();
  EXPECT_EQ(file_bytes(fs::path(r.final_model_dir) / "generation_config.json"),
            file_bytes(fs::path(source) / "generation_config.json"));
  EXPECT_EQ(model::load_hf_config(r.final_model_dir).eos_token_id_list, (std::vector<int64_t>{1, 2}));
  fs::remove_all(a);
}
