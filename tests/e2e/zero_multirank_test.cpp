// `zerotrain train` as a multi-process job (mpirun, oversubscribed on small machines):
//   - a checkpoint saved by 4 ranks at ZeRO stage 2 resumes at 2 ranks stage 3 and at 1
//     rank stage 0, and each continuation ends where the uninterrupted 4-rank run ends;
//   - a checkpoint of 2 ranks with ZeRO-Offload resumes at 1 rank without it, at 4 ranks
//     with half the state offloaded and at 2 ranks stage 3 with the state on NVMe, ending
//     where the uninterrupted run ends;
//   - a rank killed mid-run ends the job quickly with a non-zero exit naming the rank, and
//     `zerotrain launch --max-restarts 1` resumes from the latest checkpoint and finishes.
// Skipped when mpirun is not installed.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/shell.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace {

using Result = zt::testing::ShellResult;
using zt::testing::sh;

// Collectives time out fast and each rank runs one thread (ranks share the cores).
const std::string kMpiEnv = zt::testing::kMpirunEnv + "ZT_COLLECTIVE_TIMEOUT_S=60 OMP_NUM_THREADS=1 ";

using zt::testing::have_mpirun;

std::string bin() { return zt::testing::zerotrain_binary(); }

// Global batch 8 = micro x accumulation 2 x ranks; 6 steps, a checkpoint every 3.
std::string write_run(const fs::path& dir) {
  const fs::path yaml = dir / "run.yaml";
  std::ofstream(yaml) << "model: {preset: tiny-gpt2}\n"
                         "data:\n  train: ['"
                      << ZT_SOURCE_DIR << "/data/text/artistic.txt', '" << ZT_SOURCE_DIR
                      << "/data/text/apache-2.0.txt']\n  validation_fraction: 0.1\n  seq_len: 32\n"
                         "gradient_accumulation_steps: 2\nlearning_rate: 3.0e-3\nlr_scheduler_type: cosine\n"
                         "warmup_steps: 2\nmax_steps: 6\nsave_interval: 3\neval_interval: 0\nsteps_per_print: 1\n"
                         "seed: 7\n";
  return yaml.string();
}

std::string mpirun(int np, const std::string& args) {
  return kMpiEnv + "mpirun -np " + std::to_string(np) + " " + bin() + " train " + args;
}

// max |a - b| / max |b| over every tensor of two model.safetensors files.
double weight_difference(const fs::path& a, const fs::path& b) {
  zt::io::SafetensorsReader ra(a.string()), rb(b.string());
  double diff = 0, scale = 0;
  for (const std::string& name : rb.names()) {
    const std::vector<float> va = ra.tensor(name).to_f32_vector(), vb = rb.tensor(name).to_f32_vector();
    for (size_t i = 0; i < vb.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(va[i]) - vb[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(vb[i])));
    }
  }
  return diff / scale;
}

}  // namespace

TEST(ZeroMultiRank, CheckpointOfFourRanksStage2ResumesAtTwoRanksStage3AndOneRankStage0) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  zt::testing::TempDir dir(zt::testing::build_temp_path("zero_mr_"));
  const std::string run = write_run(dir.path());
  const fs::path a = dir.path() / "a", b = dir.path() / "b", c = dir.path() / "c";
  Result r =
      sh(mpirun(4, run + " --per_device_train_batch_size 1 --zero_optimization.stage 2 --output_dir " + a.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  const fs::path step3 = a / "checkpoints" / "global_step3";
  ASSERT_TRUE(fs::exists(step3 / "shard_rank3.safetensors")) << r.out;

  r = sh(mpirun(2, run +
                       " --per_device_train_batch_size 2 --zero_optimization.stage 3 "
                       "--zero_optimization.stage3_gather_16bit_weights_on_model_save true --output_dir " +
                       b.string() + " --resume " + step3.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("saved by 4 ranks"), std::string::npos) << r.out;
  r = sh(kMpiEnv + bin() + " train " + run + " --per_device_train_batch_size 4 --output_dir " + c.string() +
         " --resume " + step3.string());
  ASSERT_EQ(r.rc, 0) << r.out;

  const double db = weight_difference(b / "final" / "model.safetensors", a / "final" / "model.safetensors");
  const double dc = weight_difference(c / "final" / "model.safetensors", a / "final" / "model.safetensors");
  std::printf("[zero-reshard] 4 ranks stage 2 -> 2 ranks stage 3: max rel diff %.2e; -> 1 rank stage 0: %.2e\n", db,
              dc);
  // AdamW over 3 more steps of a reordered sum (see tests/comm/zero_engine_test.cpp).
  EXPECT_LE(db, 2e-4);
  EXPECT_LE(dc, 2e-4);
}

// ZeRO-Offload's checkpoints are the plain ones: 2 ranks at stage 2 with the optimizer state
// on the host save a checkpoint that 1 rank resumes without offload and 4 ranks resume at
// stage 1 with offload (half the state on the host), each continuation ending where the
// uninterrupted offloaded run ends.
TEST(ZeroMultiRank, OffloadedCheckpointResumesAtOtherWorldSizesWithAndWithoutOffload) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  zt::testing::TempDir dir(zt::testing::build_temp_path("zero_off_mr_"));
  const std::string run = write_run(dir.path());
  const std::string offload = " --zero_optimization.offload_optimizer.device cpu";
  const fs::path a = dir.path() / "a", b = dir.path() / "b", c = dir.path() / "c";
  Result r = sh(mpirun(2, run + " --per_device_train_batch_size 2 --zero_optimization.stage 2" + offload +
                              " --output_dir " + a.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("ZeRO-Offload: the optimizer state of"), std::string::npos) << r.out;
  const fs::path step3 = a / "checkpoints" / "global_step3";
  ASSERT_TRUE(fs::exists(step3 / "shard_rank1.safetensors")) << r.out;

  r = sh(kMpiEnv + bin() + " train " + run + " --per_device_train_batch_size 4 --output_dir " + b.string() +
         " --resume " + step3.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("saved by 2 ranks"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ZeRO-Offload"), std::string::npos) << r.out;
  r = sh(mpirun(4, run + " --per_device_train_batch_size 1 --zero_optimization.stage 1" + offload +
                       " --zero_optimization.offload_optimizer.ratio 0.5 --output_dir " + c.string() + " --resume " +
                       step3.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("of state stays on the cpu"), std::string::npos) << r.out;

  // And at 2 ranks with stage 3 and the state swapped to NVMe (each rank its own swap file).
  const fs::path d = dir.path() / "d", swap = dir.path() / "swap";
  fs::create_directories(swap);
  r = sh(mpirun(2, run + " --per_device_train_batch_size 2 --zero_optimization.stage 3"
                         " --zero_optimization.stage3_gather_16bit_weights_on_model_save true"
                         " --zero_optimization.offload_optimizer.device nvme"
                         " --zero_optimization.offload_optimizer.nvme_path " +
                       swap.string() + " --zero_optimization.offload_optimizer.buffer_count 2 --output_dir " +
                       d.string() + " --resume " + step3.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("lives on NVMe in"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_empty(swap)) << "every rank removed its swap folder";

  // And with the parameters on NVMe too (offload_param nvme, all of them: max_in_cpu 0).
  const fs::path e = dir.path() / "e";
  r = sh(mpirun(2, run + " --per_device_train_batch_size 2 --zero_optimization.stage 3"
                         " --zero_optimization.stage3_param_persistence_threshold 0"
                         " --zero_optimization.stage3_gather_16bit_weights_on_model_save true"
                         " --zero_optimization.offload_optimizer.device cpu"
                         " --zero_optimization.offload_param.device nvme"
                         " --zero_optimization.offload_param.nvme_path " +
                       swap.string() +
                       " --zero_optimization.offload_param.max_in_cpu 0"
                       " --zero_optimization.offload_param.buffer_count 2 --output_dir " +
                       e.string() + " --resume " + step3.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("offload_param nvme: this rank's 16-bit parameter slices: 0 of"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_empty(swap)) << "every rank removed its swap folder";

  const double db = weight_difference(b / "final" / "model.safetensors", a / "final" / "model.safetensors");
  const double dc = weight_difference(c / "final" / "model.safetensors", a / "final" / "model.safetensors");
  const double dd = weight_difference(d / "final" / "model.safetensors", a / "final" / "model.safetensors");
  const double de = weight_difference(e / "final" / "model.safetensors", a / "final" / "model.safetensors");
  std::printf("[offload-reshard] 2 ranks offloaded -> 1 rank plain: max rel diff %.2e; -> 4 ranks ratio 0.5: %.2e; "
              "-> 2 ranks stage 3 nvme: %.2e; -> 2 ranks stage 3, parameters on nvme: %.2e\n",
              db, dc, dd, de);
  EXPECT_LE(db, 2e-4);
  EXPECT_LE(dc, 2e-4);
  EXPECT_LE(dd, 2e-4);
  EXPECT_LE(de, 2e-4);
}

TEST(ZeroMultiRank, AKilledRankEndsTheJobAndMaxRestartsResumesIt) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  zt::testing::TempDir dir(zt::testing::build_temp_path("zero_kill_"));
  const std::string run = write_run(dir.path());
  const std::string common = run + " --per_device_train_batch_size 2 --zero_optimization.stage 2 --output_dir ";

  // Rank 1 dies after step 4 (a checkpoint exists from step 3).
  const auto t0 = std::chrono::steady_clock::now();
  const std::string drill = "ZT_TEST_FAIL_AT=train.step_done@rank1.step4 ";  // core/fail_point.h
  Result r = sh(kMpiEnv + drill + mpirun(2, common + (dir.path() / "x").string()));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_LT(secs, 30.0) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.path() / "x" / "final")) << r.out;

  // Under the launcher with one restart: the second attempt resumes from step 3 and finishes.
  r = sh(kMpiEnv + drill + bin() + " launch --nproc-per-node 2 --max-restarts 1 -- " + bin() + " train " + common +
         (dir.path() / "y").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("restart 1/1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path() / "y" / "final" / "model.safetensors")) << r.out;
}

TEST(ZeroMultiRank, Stage3RanksReadTheirSlicesOfAnHfModelAndSaveItBack) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  zt::testing::TempDir dir(zt::testing::build_temp_path("zero_hf3_"));
  const std::string run = write_run(dir.path());
  const fs::path base = dir.path() / "base", tuned = dir.path() / "tuned";
  Result r = sh(kMpiEnv + bin() + " train " + run + " --per_device_train_batch_size 4 --max_steps 2 --output_dir " +
                base.string());
  ASSERT_EQ(r.rc, 0) << r.out;

  // Fine-tune the saved HF directory at stage 3 on 2 ranks with lr 0: the slices each rank
  // reads from the files, gathered and saved, must be the original weights exactly.
  const fs::path yaml = dir.path() / "finetune.yaml";
  std::ofstream(yaml) << "model: {path: '" << (base / "final").string() << "'}\n"
                      << "data:\n  train: ['" << ZT_SOURCE_DIR << "/data/text/artistic.txt']\n  seq_len: 32\n"
                      << "per_device_train_batch_size: 2\nlearning_rate: 0.0\nmax_steps: 1\nsave_interval: 0\n"
                         "eval_interval: 0\nseed: 7\noutput_dir: '"
                      << tuned.string() << "'\n";
  // Every unit sharded, then the default threshold (the embedding and head stay gathered).
  for (const char* threshold : {"0", "100000"}) {
    r = sh(mpirun(2, yaml.string() +
                         " --zero_optimization.stage 3 --zero_optimization.stage3_param_persistence_threshold " +
                         threshold +
                         " --zero_optimization.stage3_gather_16bit_weights_on_model_save true"
                         " --overwrite_output_dir"));
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(weight_difference(tuned / "final" / "model.safetensors", base / "final" / "model.safetensors"), 0.0)
        << "persistence threshold " << threshold;
  }
}

namespace {

// The metrics.jsonl step records' comm_bytes_per_step, and the wall_clock_breakdown times.
struct StepStats {
  std::vector<double> comm_bytes;
  double comm_ms = 0;
  int timed = 0;
};
StepStats step_stats(const fs::path& run_dir) {
  StepStats s;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"loss_scale\"") == std::string::npos) continue;
    const size_t at = line.find("\"comm_bytes_per_step\":");
    if (at != std::string::npos) s.comm_bytes.push_back(std::stod(line.substr(at + 22)));
    const size_t t = line.find("\"comm\":");
    if (t != std::string::npos) {
      s.comm_ms += std::stod(line.substr(t + 7));
      ++s.timed;
    }
  }
  return s;
}

}  // namespace

// communication_data_type bf16 on 2 CPU ranks (fp32 training, ZeRO stage 0): the gradient
// all-reduce moves half the bytes per step, and the weights end within bf16 rounding of
// the fp32 reduction's. wall_clock_breakdown reports the time blocked in collectives.
TEST(ZeroMultiRank, Bf16CommunicationHalvesTheBytesPerStep) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  zt::testing::TempDir dir(zt::testing::build_temp_path("zero_comm_dtype_"));
  const std::string run = write_run(dir.path());
  const std::string common = run + " --max_steps 2 --save_interval 0 --samples.tokens 0 --wall_clock_breakdown true ";
  const Result f32 = sh(mpirun(2, common + "--output_dir " + (dir.path() / "f32").string()));
  ASSERT_EQ(f32.rc, 0) << f32.out;
  const Result bf16 =
      sh(mpirun(2, common + "--communication_data_type bf16 --output_dir " + (dir.path() / "bf16").string()));
  ASSERT_EQ(bf16.rc, 0) << bf16.out;
  EXPECT_EQ(bf16.out.find("communication_data_type: accepted but has no effect"), std::string::npos) << bf16.out;
  const StepStats a = step_stats(dir.path() / "f32"), b = step_stats(dir.path() / "bf16");
  ASSERT_EQ(a.comm_bytes.size(), 2u);
  ASSERT_EQ(b.comm_bytes.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_GT(a.comm_bytes[i], 0.0);
    EXPECT_DOUBLE_EQ(b.comm_bytes[i], 0.5 * a.comm_bytes[i]) << "step " << i + 1;
  }
  EXPECT_EQ(a.timed, 2);
  EXPECT_GT(a.comm_ms, 0.0) << "two ranks wait for their all-reduces";
  EXPECT_NE(f32.out.find("| comm: "), std::string::npos) << f32.out;
  const double d = weight_difference(dir.path() / "bf16" / "final" / "model.safetensors",
                                     dir.path() / "f32" / "final" / "model.safetensors");
  EXPECT_GT(d, 0.0) << "the bf16 reduction must round";
  EXPECT_LT(d, 1e-2);
}
