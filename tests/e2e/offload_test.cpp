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
#include <string>
#include <vector>

#include "common/small_run.h"
#include "common/temp_dir.h"
#include "train/trainer.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

using zt::testing::file_bytes;
using zt::testing::small_run;

fs::path temp_dir(const std::string& name) { return zt::testing::fresh_test_dir("offload_", name); }

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

Logged run_logged(const train::TrainConfig& c) {
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
  ::setenv("ZT_ZERO_KEEP_STAGE", "1", 1);
  Logged plain, to_plain;
  try {
    plain = run_logged(small_run(plain_dir, stage3));
    to_plain = run_logged(small_run(resumed, with(stage3, {"--resume", ckpt})));
  } catch (...) {
    ::unsetenv("ZT_ZERO_KEEP_STAGE");
    throw;
  }
  ::unsetenv("ZT_ZERO_KEEP_STAGE");
  ASSERT_EQ(plain.result.losses.size(), 6u);
  EXPECT_EQ(both.result.losses, plain.result.losses);
  EXPECT_EQ(final_weights(both.result), final_weights(plain.result));
  ASSERT_EQ(to_plain.result.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(to_plain.result.losses[i], plain.result.losses[3 + i]) << "step " << 4 + i;
  EXPECT_EQ(final_weights(to_plain.result), final_weights(plain.result));
  for (const fs::path& d : {plain_dir, both_dir, resumed}) fs::remove_all(d);
}
