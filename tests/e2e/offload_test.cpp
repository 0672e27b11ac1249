// ZeRO-Offload (offload_optimizer {device: cpu}) end to end on the CPU backend, where the
// offload runs with host staging (zero/offload_optimizer.h): the same code path as on the
// GPU, the copies being memcpy.
//  - an offloaded run (every unit's state on the host, or half of it: ratio 0.5) trains
//    bitwise as the run without offload: the same losses and the same final weights;
//  - its checkpoints are the same named tensors: an offloaded run's checkpoint resumes
//    without offload and a plain run's resumes with it, both continuing bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/scoped_env.h"
#include "common/shell.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "train/trainer.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

using zt::testing::file_bytes;
using zt::testing::small_run;

fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("offload_", name); }

// The nvme_path of the NVMe tests (memory-backed where possible: common/temp_dir.h).
fs::path swap_dir(const std::string& name) {
  const fs::path p = zt::testing::swap_temp_path("offload_" + name + "_");
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

const std::vector<std::string> kStage2{"--bf16", "true", "--zero_optimization.stage", "2"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kOffload{"--zero_optimization.offload_optimizer.device", "cpu"};

struct Logged {
  train::TrainResult result;
  std::string log;
};

Logged run_logged(const config::TrainConfig& c) {
  ::testing::internal::CaptureStderr();
  Logged out;
  try {
    out.result = train::run_training(c);
  } catch (...) {
    std::fprintf(stderr, "%s", ::testing::internal::GetCapturedStderr().c_str());
    throw;
  }
  out.log = ::testing::internal::GetCapturedStderr();
  return out;
}

std::string final_weights(const train::TrainResult& r) {
  return file_bytes(fs::path(r.final_model_dir) / "model.safetensors");
}

}  // namespace

TEST(OffloadTraining, OffloadedRunTrainsBitwiseAsThePlainRun) {
  const fs::path plain_dir = temp_dir("plain"), all_dir = temp_dir("all"), half_dir = temp_dir("half");
  const Logged plain = run_logged(small_run(plain_dir, kStage2));
  const Logged all = run_logged(small_run(all_dir, with(kStage2, kOffload)));
  const Logged half =
      run_logged(small_run(half_dir, with(with(kStage2, kOffload), {"--zero_optimization.offload_optimizer.ratio", "0.5"})));
  ASSERT_EQ(plain.result.losses.size(), 6u);
  for (double l : plain.result.losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_EQ(all.result.losses, plain.result.losses);
  EXPECT_EQ(half.result.losses, plain.result.losses);
  EXPECT_EQ(final_weights(all.result), final_weights(plain.result));
  EXPECT_EQ(final_weights(half.result), final_weights(plain.result));
  // The log says where the state lives; the plain run says nothing of offload.
  EXPECT_NE(all.log.find("ZeRO-Offload: the optimizer state of"), std::string::npos) << all.log;
  EXPECT_NE(all.log.find("(100.0% of the elements"), std::string::npos) << all.log;
  EXPECT_NE(half.log.find("of state stays on the cpu"), std::string::npos) << half.log;
  EXPECT_EQ(plain.log.find("ZeRO-Offload"), std::string::npos);
  EXPECT_EQ(all.log.find("offload_optimizer"), all.log.find("offload_optimizer.ratio")) << "no warning about it";
  for (const fs::path& d : {plain_dir, all_dir, half_dir}) fs::remove_all(d);
}

TEST(OffloadTraining, CheckpointsResumeWithAndWithoutOffload) {
  // bf16 (the host steps the f32 master, a checkpoint's state) and fp32 without master
  // (the host steps its copy of the parameters, which a resume must refresh).
  for (const char* bf16 : {"true", "false"}) {
    SCOPED_TRACE(std::string("bf16 ") + bf16);
    const std::vector<std::string> stage2{"--bf16", bf16, "--zero_optimization.stage", "2"};
    const fs::path off_dir = temp_dir("off"), plain_dir = temp_dir("plain"), a = temp_dir("a"), b = temp_dir("b"),
                   c = temp_dir("c");
    const Logged off = run_logged(small_run(off_dir, with(stage2, kOffload)));
    const Logged plain = run_logged(small_run(plain_dir, stage2));
    ASSERT_EQ(off.result.losses, plain.result.losses);
    // Offloaded checkpoint -> plain run and -> offloaded run; plain checkpoint -> offloaded run.
    const std::string off_ckpt = (off_dir / "run" / "checkpoints" / "global_step3").string();
    const std::string plain_ckpt = (plain_dir / "run" / "checkpoints" / "global_step3").string();
    const Logged to_plain = run_logged(small_run(a, with(stage2, {"--resume", off_ckpt})));
    const Logged to_off = run_logged(small_run(b, with(with(stage2, kOffload), {"--resume", plain_ckpt})));
    const Logged off_to_off = run_logged(small_run(c, with(with(stage2, kOffload), {"--resume", off_ckpt})));
    for (const Logged* r : {&to_plain, &to_off, &off_to_off}) {
      ASSERT_EQ(r->result.losses.size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r->result.losses[i], plain.result.losses[3 + i]) << "step " << 4 + i;
      EXPECT_EQ(final_weights(r->result), final_weights(plain.result));
    }
    for (const fs::path& d : {off_dir, plain_dir, a, b, c}) fs::remove_all(d);
  }
}

// offload_param with offload_optimizer at stage 3: one process keeps stage 3 (the host
// partitions are the point) and trains bitwise as the plain stage-3 machinery
// (ZT_ZERO_KEEP_STAGE=1 keeps it for the plain run); its checkpoint resumes without
// offload, continuing bitwise.
TEST(OffloadTraining, ParameterOffloadAtStage3TrainsAsThePlainRun) {
  const fs::path plain_dir = temp_dir("plain3"), both_dir = temp_dir("both"), resumed = temp_dir("resumed3");
  const std::vector<std::string> stage3{"--bf16", "true", "--zero_optimization.stage", "3"};
  const std::vector<std::string> param{"--zero_optimization.offload_param.device", "cpu"};
  const Logged both = run_logged(small_run(both_dir, with(with(stage3, kOffload), param)));
  EXPECT_EQ(both.log.find("runs as stage 0"), std::string::npos) << both.log;
  const std::string ckpt = (both_dir / "run" / "checkpoints" / "global_step3").string();
  Logged plain, to_plain;
  {
    const zt::testing::ScopedEnv keep("ZT_ZERO_KEEP_STAGE", "1");
    plain = run_logged(small_run(plain_dir, stage3));
    to_plain = run_logged(small_run(resumed, with(stage3, {"--resume", ckpt})));
  }
  ASSERT_EQ(plain.result.losses.size(), 6u);
  EXPECT_EQ(both.result.losses, plain.result.losses);
  EXPECT_EQ(final_weights(both.result), final_weights(plain.result));
  ASSERT_EQ(to_plain.result.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(to_plain.result.losses[i], plain.result.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(final_weights(to_plain.result), final_weights(plain.result));
  for (const fs::path& d : {plain_dir, both_dir, resumed}) fs::remove_all(d);
}

namespace {

// offload_optimizer {device: nvme} into `nvme` with three swap buffers, reads and writes
// pipelined (the pieces outnumber the buffers: every step evicts and reads back), and
// sub-groups of 20000 elements (the embedding, 65536, is stepped in four pieces).
std::vector<std::string> nvme_offload(const fs::path& nvme) {
  return {"--zero_optimization.sub_group_size",
          "20000",
          "--zero_optimization.offload_optimizer.device",
          "nvme",
          "--zero_optimization.offload_optimizer.nvme_path",
          nvme.string(),
          "--zero_optimization.offload_optimizer.buffer_count",
          "3",
          "--zero_optimization.offload_optimizer.pipeline_read",
          "true",
          "--zero_optimization.offload_optimizer.pipeline_write",
          "true",
          "--aio.block_size",
          "65536"};
}

// The same flags as one command-line string, for the runs through the binary.
std::string nvme_offload_flags(const fs::path& nvme) {
  std::string flags;
  for (const std::string& a : nvme_offload(nvme)) flags += " " + a;
  return flags;
}

size_t swap_folders(const fs::path& nvme) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(nvme)) n += e.path().filename().string().rfind("zerotrain-", 0) == 0;
  return n;
}

}  // namespace

// ZeRO-Infinity's optimizer side: the host state swapped to a folder trains 20 steps bitwise
// as the run without offload (bf16 with its master on the drive; fp32 without master), its
// checkpoints (read from the swap file) resume without offload and a plain checkpoint
// resumes with it, bitwise; the swap folder is gone after each run.
TEST(OffloadTraining, NvmeOptimizerStateTrainsBitwiseAndResumesEitherWay) {
  for (const char* bf16 : {"true", "false"}) {
    SCOPED_TRACE(std::string("bf16 ") + bf16);
    // 20 steps (checkpoints every 3, the last 5 kept: the resumes from step 9 run 11).
    const std::vector<std::string> stage2{"--bf16", bf16, "--zero_optimization.stage", "2", "--max_steps", "20"};
    const fs::path nvme = swap_dir("swap"), off_dir = temp_dir("nvme_run"), plain_dir = temp_dir("plain"),
                   a = temp_dir("a"), b = temp_dir("b");
    const Logged off = run_logged(small_run(off_dir, with(stage2, nvme_offload(nvme))));
    EXPECT_NE(off.log.find("lives on NVMe in " + nvme.string()), std::string::npos) << off.log;
    {  // The step records carry the swap traffic (as the step line does: " | nvme r ... w ... GB/s").
      std::ifstream metrics(off_dir / "run" / "metrics.jsonl");
      std::string line, last_step;
      while (std::getline(metrics, line))
        if (line.find("\"nvme\"") != std::string::npos) last_step = line;
      EXPECT_NE(last_step.find("\"read_bytes_per_step\""), std::string::npos) << last_step;
      EXPECT_EQ(last_step.find("\"read_bytes_per_step\":0.0"), std::string::npos) << "every step swaps\n" << last_step;
    }
    EXPECT_EQ(off.log.find("offload_optimizer.device nvme"), std::string::npos) << "no warning: it runs\n" << off.log;
    EXPECT_EQ(off.log.find("aio: accepted"), std::string::npos) << off.log;
    EXPECT_EQ(swap_folders(nvme), 0u) << "the swap folder goes with the run";
    const Logged plain = run_logged(small_run(plain_dir, stage2));
    ASSERT_EQ(plain.result.losses.size(), 20u);
    EXPECT_EQ(off.result.losses, plain.result.losses);
    EXPECT_EQ(final_weights(off.result), final_weights(plain.result));

    const std::string off_ckpt = (off_dir / "run" / "checkpoints" / "global_step9").string();
    const std::string plain_ckpt = (plain_dir / "run" / "checkpoints" / "global_step9").string();
    // The checkpoints are the same bytes: the swapped state was read from the swap file.
    for (const char* f : {"shard_rank0.safetensors"})
      EXPECT_EQ(file_bytes(fs::path(off_ckpt) / f), file_bytes(fs::path(plain_ckpt) / f)) << f;
    const Logged to_plain = run_logged(small_run(a, with(stage2, {"--resume", off_ckpt})));
    const Logged to_nvme = run_logged(small_run(b, with(with(stage2, nvme_offload(nvme)), {"--resume", plain_ckpt})));
    for (const Logged* r : {&to_plain, &to_nvme}) {
      ASSERT_EQ(r->result.losses.size(), 11u);
      for (size_t i = 0; i < 11; ++i) EXPECT_EQ(r->result.losses[i], plain.result.losses[9 + i]) << "step " << 10 + i;
      EXPECT_EQ(final_weights(r->result), final_weights(plain.result));
    }
    EXPECT_EQ(swap_folders(nvme), 0u);
    for (const fs::path& d : {nvme, off_dir, plain_dir, a, b}) fs::remove_all(d);
  }
}

// A run with its optimizer state on NVMe killed (SIGKILL) after step 4 leaves its swap
// folder behind; `--resume latest` removes it (its process is gone), continues from step 3
// and ends where an uninterrupted run ends, leaving no swap files.
TEST(OffloadTraining, NvmeRunKilledMidRunResumesAndCleansTheSwapFolder) {
  const fs::path nvme = swap_dir("swap_kill"), run_dir = temp_dir("killed"), whole_dir = temp_dir("whole");
  const std::string offload = nvme_offload_flags(nvme);
  const std::string common = " --bf16 true --zero_optimization.stage 2" + offload;
  const std::string bin = zt::testing::zerotrain_binary() + " train ";
  auto r = zt::testing::sh("ZT_TEST_FAIL_AT=train.step_done@rank0.step4 " + bin +
                           zt::testing::small_run_yaml(run_dir).string() + common);
  ASSERT_NE(r.rc, 0) << r.out;
  ASSERT_EQ(swap_folders(nvme), 1u) << "a killed run cannot remove its swap folder";
  r = zt::testing::sh(bin + zt::testing::small_run_yaml(run_dir).string() + common + " --resume latest");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("the NVMe swap folder of a zerotrain process that is gone"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  EXPECT_EQ(swap_folders(nvme), 0u) << r.out;
  r = zt::testing::sh(bin + zt::testing::small_run_yaml(whole_dir).string() + " --bf16 true --zero_optimization.stage 2");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(file_bytes(run_dir / "run" / "final" / "model.safetensors"),
            file_bytes(whole_dir / "run" / "final" / "model.safetensors"));
  for (const fs::path& d : {nvme, run_dir, whole_dir}) fs::remove_all(d);
}

// A full drive (pretended) and an nvme_path that cannot be a folder stop the run with exit
// 2 naming the path, before its first step and without leaving a swap folder.
TEST(OffloadTraining, FullOrUnusableNvmePathIsExitTwoBeforeTraining) {
  const fs::path nvme = swap_dir("swap_full"), run_dir = temp_dir("full");
  const std::string offload = nvme_offload_flags(nvme);
  const std::string train = zt::testing::zerotrain_binary() + " train " +
                            zt::testing::small_run_yaml(run_dir).string() + " --zero_optimization.stage 2";
  auto r = zt::testing::sh("ZT_TEST_DRIVE_FREE_BYTES=4096 " + train + offload);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("cannot reserve"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("free on the drive of " + nvme.string()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step      1"), std::string::npos) << r.out;
  EXPECT_EQ(swap_folders(nvme), 0u) << r.out;

  std::ofstream(nvme / "a-file") << "x";
  const std::string bad = (nvme / "a-file" / "swap").string();
  r = zt::testing::sh(train + " --zero_optimization.offload_optimizer.device nvme"
                              " --zero_optimization.offload_optimizer.nvme_path " + bad);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(bad), std::string::npos) << r.out;
  for (const fs::path& d : {nvme, run_dir}) fs::remove_all(d);
}

// offload_param cpu with the optimizer's state on NVMe (DeepSpeed's common ZeRO-Infinity
// pairing): stage 3 kept on one process (on the GPU the 16-bit partitions live in host
// memory, updated in place by the host step whose state is swapped); bitwise the plain
// stage-3 run.
TEST(OffloadTraining, ParameterOffloadWithTheOptimizerStateOnNvme) {
  const fs::path nvme = swap_dir("swap_param"), both_dir = temp_dir("nvme_param"), plain_dir = temp_dir("plain3n");
  const std::vector<std::string> stage3{"--bf16", "true", "--zero_optimization.stage", "3"};
  const Logged both = run_logged(
      small_run(both_dir, with(with(stage3, nvme_offload(nvme)), {"--zero_optimization.offload_param.device", "cpu"})));
  EXPECT_EQ(both.log.find("runs as stage 0"), std::string::npos) << both.log;
  EXPECT_NE(both.log.find("lives on NVMe in"), std::string::npos) << both.log;
  Logged plain;
  {
    const zt::testing::ScopedEnv keep("ZT_ZERO_KEEP_STAGE", "1");
    plain = run_logged(small_run(plain_dir, stage3));
  }
  ASSERT_EQ(plain.result.losses.size(), 6u);
  EXPECT_EQ(both.result.losses, plain.result.losses);
  EXPECT_EQ(final_weights(both.result), final_weights(plain.result));
  EXPECT_EQ(swap_folders(nvme), 0u);
  for (const fs::path& d : {nvme, both_dir, plain_dir}) fs::remove_all(d);
}

namespace {

// offload_param {device: nvme} into `nvme`: every slice on the drive (max_in_cpu 0) through
// two swap buffers, so every gather and every host update swaps.
std::vector<std::string> param_nvme(const fs::path& nvme) {
  return {"--zero_optimization.offload_param.device",     "nvme",
          "--zero_optimization.offload_param.nvme_path",  nvme.string(),
          "--zero_optimization.offload_param.buffer_count", "2",
          "--zero_optimization.offload_param.max_in_cpu", "0"};
}

std::string flags(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += " " + a;
  return s;
}

// Stage 3 for 20 steps with every unit gathered and released around each use (no
// persistent units) and a prefetch of about one unit.
const std::vector<std::string> kStage3Gathered{"--bf16",
                                               "true",
                                               "--zero_optimization.stage",
                                               "3",
                                               "--zero_optimization.stage3_param_persistence_threshold",
                                               "0",
                                               "--zero_optimization.stage3_prefetch_bucket_size",
                                               "70000",
                                               "--max_steps",
                                               "20"};
const std::vector<std::string> kParamCpu{"--zero_optimization.offload_param.device", "cpu"};

}  // namespace

// ZeRO-Infinity's parameter side: stage 3's 16-bit slices on NVMe (all of them, two swap
// buffers), with the optimizer state in host memory or on NVMe too, train 20 steps bitwise
// as the run with the slices in host memory; the checkpoints are the same bytes (the
// swapped slices read through the store), a checkpoint saved with the parameters on NVMe
// resumes with them in memory and one saved in memory resumes with them on NVMe, bitwise;
// the swap folders go with each run.
TEST(OffloadTraining, ParametersOnNvmeTrainBitwiseAsInMemoryAndResumeEitherWay) {
  const fs::path nvme = swap_dir("swap_params"), mem_dir = temp_dir("param_mem"), cpu_opt = temp_dir("param_nvme"),
                 nvme_opt = temp_dir("param_nvme_opt"), a = temp_dir("a"), b = temp_dir("b");
  const Logged mem = run_logged(small_run(mem_dir, with(with(kStage3Gathered, kOffload), kParamCpu)));
  ASSERT_EQ(mem.result.losses.size(), 20u);
  // A buffer_size below the largest slice warns once and the buffers take the slice's size.
  const Logged on_nvme = run_logged(small_run(
      cpu_opt, with(with(with(kStage3Gathered, kOffload), param_nvme(nvme)),
                    {"--zero_optimization.offload_param.buffer_size", "1000"})));
  const Logged both = run_logged(small_run(nvme_opt, with(with(kStage3Gathered, nvme_offload(nvme)), param_nvme(nvme))));
  EXPECT_EQ(on_nvme.result.losses, mem.result.losses);
  EXPECT_EQ(both.result.losses, mem.result.losses);
  EXPECT_EQ(final_weights(on_nvme.result), final_weights(mem.result));
  EXPECT_EQ(final_weights(both.result), final_weights(mem.result));
  // The log says where the slices live; nvme runs, so no warning about it.
  EXPECT_NE(on_nvme.log.find("offload_param nvme: this rank's 16-bit parameter slices: 0 of"), std::string::npos)
      << on_nvme.log;
  EXPECT_NE(on_nvme.log.find("on NVMe in " + nvme.string()), std::string::npos) << on_nvme.log;
  EXPECT_NE(on_nvme.log.find("offload_param.buffer_size 1000 elements is smaller"), std::string::npos) << on_nvme.log;
  EXPECT_EQ(on_nvme.log.find("offload_param.device nvme"), std::string::npos) << on_nvme.log;
  EXPECT_EQ(both.log.find("offload_param.buffer_size"), std::string::npos) << both.log;
  EXPECT_NE(mem.log.find("offload_param cpu: this rank's 16-bit parameter slices:"), std::string::npos) << mem.log;
  {  // The parameters' swaps are in the step line's nvme traffic (the optimizer is in memory).
    std::ifstream metrics(cpu_opt / "run" / "metrics.jsonl");
    std::string line, last_step;
    while (std::getline(metrics, line))
      if (line.find("\"nvme\"") != std::string::npos) last_step = line;
    EXPECT_NE(last_step.find("\"read_bytes_per_step\""), std::string::npos) << last_step;
    EXPECT_EQ(last_step.find("\"read_bytes_per_step\":0.0"), std::string::npos) << "every step swaps\n" << last_step;
  }
  EXPECT_EQ(swap_folders(nvme), 0u) << "the swap folders go with the runs";

  const std::string mem_ckpt = (mem_dir / "run" / "checkpoints" / "global_step9").string();
  const std::string nvme_ckpt = (cpu_opt / "run" / "checkpoints" / "global_step9").string();
  EXPECT_EQ(file_bytes(fs::path(nvme_ckpt) / "shard_rank0.safetensors"),
            file_bytes(fs::path(mem_ckpt) / "shard_rank0.safetensors"));
  const Logged to_mem =
      run_logged(small_run(a, with(with(with(kStage3Gathered, kOffload), kParamCpu), {"--resume", nvme_ckpt})));
  const Logged to_nvme =
      run_logged(small_run(b, with(with(with(kStage3Gathered, kOffload), param_nvme(nvme)), {"--resume", mem_ckpt})));
  for (const Logged* r : {&to_mem, &to_nvme}) {
    ASSERT_EQ(r->result.losses.size(), 11u);
    for (size_t i = 0; i < 11; ++i) EXPECT_EQ(r->result.losses[i], mem.result.losses[9 + i]) << "step " << 10 + i;
    EXPECT_EQ(final_weights(r->result), final_weights(mem.result));
  }
  EXPECT_EQ(swap_folders(nvme), 0u);
  for (const fs::path& d : {nvme, mem_dir, cpu_opt, nvme_opt, a, b}) fs::remove_all(d);
}

// A run with its parameters (and optimizer state) on NVMe killed (SIGKILL) after step 4
// leaves its swap folder; `--resume latest` removes it, continues from step 3 and ends
// with the uninterrupted run's losses and weights, leaving no swap files.
TEST(OffloadTraining, ParametersOnNvmeRunKilledMidRunResumes) {
  const fs::path nvme = swap_dir("swap_params_kill"), run_dir = temp_dir("params_killed"),
                 whole_dir = temp_dir("params_whole");
  const std::vector<std::string> stage3{"--bf16", "true", "--zero_optimization.stage", "3",
                                        "--zero_optimization.stage3_param_persistence_threshold", "0"};
  const std::string common = flags(with(with(stage3, nvme_offload(nvme)), param_nvme(nvme)));
  const std::string bin = zt::testing::zerotrain_binary() + " train ";
  auto r = zt::testing::sh("ZT_TEST_FAIL_AT=train.step_done@rank0.step4 " + bin +
                           zt::testing::small_run_yaml(run_dir).string() + common);
  ASSERT_NE(r.rc, 0) << r.out;
  ASSERT_EQ(swap_folders(nvme), 1u) << "a killed run cannot remove its swap folder";
  r = zt::testing::sh(bin + zt::testing::small_run_yaml(run_dir).string() + common + " --resume latest");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("the NVMe swap folder of a zerotrain process that is gone"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  EXPECT_EQ(swap_folders(nvme), 0u) << r.out;
  const Logged whole = run_logged(small_run(whole_dir, with(with(stage3, nvme_offload(nvme)), param_nvme(nvme))));
  ASSERT_EQ(whole.result.losses.size(), 6u);
  // The resumed run's steps 4-6 as the uninterrupted run's (the last record of each step
  // in metrics.jsonl: the resumed attempt's).
  std::map<int64_t, double> losses;
  std::ifstream metrics(run_dir / "run" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss") && j.contains("step")) losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  for (int64_t step = 4; step <= 6; ++step) EXPECT_EQ(losses[step], whole.result.losses[static_cast<size_t>(step - 1)]) << step;
  EXPECT_EQ(file_bytes(run_dir / "run" / "final" / "model.safetensors"), final_weights(whole.result));
  EXPECT_EQ(swap_folders(nvme), 0u);
  for (const fs::path& d : {nvme, run_dir, whole_dir}) fs::remove_all(d);
}

// A full drive (pretended) and an nvme_path that cannot be a folder stop a run with its
// parameters on NVMe with exit 2 naming the path, before its first step and without
// leaving a swap folder; offload_param nvme without the optimizer's offload warns that it
// takes no effect.
TEST(OffloadTraining, ParametersOnAnUnusableNvmePathIsExitTwoBeforeTraining) {
  const fs::path nvme = swap_dir("swap_params_full"), run_dir = temp_dir("params_full");
  const std::string train = zt::testing::zerotrain_binary() + " train " +
                            zt::testing::small_run_yaml(run_dir).string() +
                            " --zero_optimization.stage 3 --zero_optimization.offload_optimizer.device cpu";
  auto r = zt::testing::sh("ZT_TEST_DRIVE_FREE_BYTES=4096 " + train + flags(param_nvme(nvme)));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("cannot reserve"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("free on the drive of " + nvme.string()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step      1"), std::string::npos) << r.out;
  EXPECT_EQ(swap_folders(nvme), 0u) << r.out;

  std::ofstream(nvme / "a-file") << "x";
  const fs::path bad = nvme / "a-file" / "swap";
  r = zt::testing::sh(train + flags(param_nvme(bad)));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(bad.string()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step      1"), std::string::npos) << r.out;

  const config::TrainConfig alone =
      small_run(run_dir, with({"--zero_optimization.stage", "3", "--max_steps", "1"}, param_nvme(nvme)));
  const Logged l = run_logged(alone);
  EXPECT_NE(l.log.find("zero_optimization.offload_param.device nvme: accepted but has no effect"), std::string::npos)
      << l.log;
  EXPECT_EQ(swap_folders(nvme), 0u);
  for (const fs::path& d : {nvme, run_dir}) fs::remove_all(d);
}
