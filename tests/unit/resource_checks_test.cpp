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
  c.zero.offload_optimizer = config::OffloadDevice::CPU;
  // Per rank at stage 2 over 2 ranks: half of the parameters x (12 state + 4 gradient + 2
  // parameter staging) bytes.
  const double per_rank = tiny.num_parameters_f64() / 2 * 18;
  ::setenv("ZT_TEST_HOST_MEMORY_BYTES", std::to_string(static_cast<int64_t>(per_rank * 1.5)).c_str(), 1);
  check_offload_fits_host(c, tiny, 2, 2, 1);  // one rank on this host fits
  const std::string two = input_error_of([&] { check_offload_fits_host(c, tiny, 2, 2, 2); });
  c.zero.offload_optimizer_ratio = 0.5;
  check_offload_fits_host(c, tiny, 2, 2, 2);  // half the state on the host: fits again
  // The state on NVMe: the host holds the staging and 4 swap buffers of a piece.
  c.zero.offload_optimizer_ratio = 1.0;
  c.zero.offload_optimizer = config::OffloadDevice::NVMe;
  c.zero.sub_group_size = 1000;
  check_offload_fits_host(c, tiny, 2, 2, 2);
  c.zero.sub_group_size = 1000000000;
  c.zero.offload_optimizer_buffer_count = 64;  // 64 buffers of the embedding's slice do not fit
  const std::string nvme = input_error_of([&] { check_offload_fits_host(c, tiny, 2, 2, 2); });
  ::unsetenv("ZT_TEST_HOST_MEMORY_BYTES");
  EXPECT_HAS(nvme, "NVMe swap buffers (64)");
  EXPECT_HAS(nvme, "lower zero_optimization.offload_optimizer.buffer_count");
  EXPECT_HAS(two, "run.yaml: the offloaded optimizer state and its staging buffers");
  EXPECT_HAS(two, "x 2 ranks on this host");
  EXPECT_HAS(two, "lower zero_optimization.offload_optimizer.ratio");
}

}  // namespace
}  // namespace zt::train
