// train::check_global_batch_fits_data and check_model_state_fits: a run that cannot work
// (a global batch beyond the data's windows per epoch; model states beyond free memory)
// is refused before it starts, with the numbers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/input_error.h"
#include "core/error.h"
#include "model/config.h"
#include "train/resource_checks.h"

namespace zt::train {
namespace {

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

using zt::testing::input_error_of;

config::TrainConfig config(int64_t micro, int64_t gas, int world) {
  config::TrainConfig c;
  c.source = "run.yaml";
  c.device = "cpu";
  c.micro_batch_per_gpu = micro;
  c.grad_accum_steps = gas;
  c.world_size = world;
  return c;
}

TEST(ResourceChecks, GlobalBatchMustFitTheDataWindows) {
  check_global_batch_fits_data(config(16, 4, 2), 128, 64);  // exactly one epoch per step
  const std::string e = input_error_of([] { check_global_batch_fits_data(config(16, 100000, 1), 6567, 128); });
  EXPECT_HAS(e, "run.yaml: the global batch");
  EXPECT_HAS(e, "gradient_accumulation_steps 100000");
  EXPECT_HAS(e, "6567 windows of 128 tokens");
  // Products that would overflow int64 are still caught.
  EXPECT_HAS(input_error_of([] { check_global_batch_fits_data(config(1 << 30, int64_t{1} << 40, 1 << 20), 100, 8); }),
             "the global batch");
  EXPECT_HAS(input_error_of([] { check_global_batch_fits_data(config(4, 2, 1), 7, 8); }), "7 windows");
}

TEST(ResourceChecks, ModelStatesMustFitFreeMemory) {
  const config::TrainConfig c = config(1, 1, 1);
  const model::ModelConfig tiny = model::preset_config("tiny-gpt2");
  check_model_state_fits(c, tiny, 0, 1);  // ~14 MB fits this machine
  model::ModelConfig huge = tiny;
  huge.num_layers = 1000000000;
  const std::string e = input_error_of([&] { check_model_state_fits(c, huge, 0, 1); });
  EXPECT_HAS(e, "run.yaml: the model's parameters, gradients and optimizer state");
  EXPECT_HAS(e, "ZeRO stage 0 over 1 rank(s)");
  EXPECT_HAS(e, "is available (MemAvailable");
  ::setenv("ZT_TEST_HOST_MEMORY_BYTES", "10000000", 1);  // 10 MB: tiny-gpt2's 16 bytes/parameter do not fit
  const std::string small = input_error_of([&] { check_model_state_fits(c, tiny, 0, 1); });
  check_model_state_fits(c, tiny, 3, 2);  // stage 3 over 2 ranks: half of everything per rank
  // ...but two ranks on this host need it twice.
  const std::string two = input_error_of([&] { check_model_state_fits(c, tiny, 3, 2, 2); });
  EXPECT_HAS(two, "x 2 ranks on this host");
  ::unsetenv("ZT_TEST_HOST_MEMORY_BYTES");
  EXPECT_HAS(small, "need 13.6");
  EXPECT_HAS(small, "but only 9.54 MiB is available");
}

// ZeRO-Offload on the GPU: the host must hold every local rank's offloaded state and
// staging; the refusal names the bytes, the ranks and the ratio to lower.
TEST(ResourceChecks, OffloadedStateMustFitHostMemory) {
  config::TrainConfig c = config(1, 1, 2);
  c.device = "cuda";
  c.precision = config::Precision::BF16;
  c.zero.stage = 2;
  const model::ModelConfig tiny = model::preset_config("tiny-gpt2");
  check_offload_fits_host(c, tiny, 2, 2, 2);  // no offload: nothing to check
  c.zero.offload_optimizer.device = config::OffloadDevice::CPU;
  // Per rank at stage 2 over 2 ranks: half of the parameters x (12 state + 4 gradient + 2
  // parameter staging) bytes.
  const double per_rank = tiny.num_parameters_f64() / 2 * 18;
  ::setenv("ZT_TEST_HOST_MEMORY_BYTES", std::to_string(static_cast<int64_t>(per_rank * 1.5)).c_str(), 1);
  check_offload_fits_host(c, tiny, 2, 2, 1);  // one rank on this host fits
  const std::string two = input_error_of([&] { check_offload_fits_host(c, tiny, 2, 2, 2); });
  c.zero.offload_optimizer.ratio = 0.5;
  check_offload_fits_host(c, tiny, 2, 2, 2);  // half the state on the host: fits again
  // The state on NVMe: the host holds the staging and 4 swap buffers of a piece.
  c.zero.offload_optimizer.ratio = 1.0;
  c.zero.offload_optimizer.device = config::OffloadDevice::NVMe;
  c.zero.sub_group_size = 1000;
  check_offload_fits_host(c, tiny, 2, 2, 2);
  c.zero.sub_group_size = 1000000000;
  c.zero.offload_optimizer.buffer_count = 64;  // 64 buffers of the embedding's slice do not fit
  const std::string nvme = input_error_of([&] { check_offload_fits_host(c, tiny, 2, 2, 2); });
  ::unsetenv("ZT_TEST_HOST_MEMORY_BYTES");
  EXPECT_HAS(nvme, "NVMe swap buffers (64)");
  EXPECT_HAS(nvme, "lower zero_optimization.offload_optimizer.buffer_count");
  EXPECT_HAS(two, "run.yaml: the offloaded optimizer state and its staging buffers");
  EXPECT_HAS(two, "x 2 ranks on this host");
  EXPECT_HAS(two, "lower zero_optimization.offload_optimizer.ratio");
}

// The free-space pre-check's arithmetic: at a save the drive holds keep_last checkpoints
// and the one being written (the oldest is removed only after the new one is complete),
// one more when load_best_model_at_end keeps the best aside; every save with keep_last 0.
TEST(ResourceChecks, OutputRoomCountsKeepLastPlusTheCheckpointBeingSaved) {
  const auto room = [](int64_t keep, bool best, int64_t saves, int64_t on_disk) {
    return output_room(CheckpointPlan{keep, best, saves, on_disk}, 100.0, 10.0);
  };
  OutputRoom r = room(2, false, 10, 0);
  EXPECT_EQ(r.checkpoints_at_save, 3);     // keep_last 2 + the one being written
  EXPECT_EQ(r.checkpoints_with_final, 2);  // the kept ones beside final/
  EXPECT_EQ(r.bytes, 120.0);               // 2 x 10 + final/ 100 > 3 x 10
  EXPECT_EQ(output_room(CheckpointPlan{2, false, 10, 0}, 1.0, 10.0).bytes, 30.0);  // 3 at once is the peak
  EXPECT_EQ(room(2, true, 10, 0).checkpoints_at_save, 4);                          // the best kept aside
  EXPECT_EQ(room(2, false, 1, 0).checkpoints_at_save, 1);                          // one save: one checkpoint
  EXPECT_EQ(room(2, false, 2, 0).checkpoints_at_save, 2);
  EXPECT_EQ(room(0, false, 7, 0).checkpoints_at_save, 7);  // keep_last 0 keeps every save
  EXPECT_EQ(room(0, false, 7, 0).checkpoints_with_final, 7);
  // A resumed run: the checkpoints on the drive already took their room.
  EXPECT_EQ(room(2, false, 10, 2).checkpoints_at_save, 1);
  EXPECT_EQ(room(3, false, 10, 1).checkpoints_at_save, 3);
  EXPECT_EQ(room(2, false, 10, 5).checkpoints_at_save, 1);  // more than kept: still the one written
  EXPECT_EQ(room(2, false, 10, 5).checkpoints_with_final, 0);
  // save_strategy no: final/ alone.
  r = room(2, false, 0, 0);
  EXPECT_EQ(r.checkpoints_at_save, 0);
  EXPECT_EQ(r.bytes, 100.0);
}

TEST(ResourceChecks, ADriveTooSmallForKeepLastPlusOneIsBadInputWithTheCount) {
  config::TrainConfig c = config(4, 1, 1);
  c.output_dir = "out";
  const CheckpointPlan plan{2, false, 10, 0};
  check_output_drive_room(c, plan, 100.0, 1000.0, 3000.0);  // exactly 3 checkpoints: fits
  // Room for final/ and one checkpoint (what the check counted before) is not enough.
  const std::string e = input_error_of([&] { check_output_drive_room(c, plan, 100.0, 1000.0, 1100.0); });
  EXPECT_HAS(e, "output_dir 'out'");
  EXPECT_HAS(e, "3 at once while one is saved (keep_last 2 + the one being written");
  EXPECT_HAS(e, "2 beside final/ at the end");
  EXPECT_HAS(input_error_of([&] {
               check_output_drive_room(c, CheckpointPlan{0, false, 4, 0}, 1, 1000, 3000);
             }),
             "keep_last 0 keeps every one");
}

}  // namespace
}  // namespace zt::train
