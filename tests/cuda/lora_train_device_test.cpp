// A LoRA run on the GPU (issue 20; runs on the GPU machine, skipped without one): the
// Llama-3 fixture's base read through the host staging copy, the adapters filled there and
// copied, trains as the same run on the CPU (f32: the same losses up to the kernels'
// summation order); bf16 (16-bit base and adapters, f32 master) trains and writes an f32
// PEFT adapter folder; a GPU checkpoint (adapters only) resumes on the CPU; ZeRO-3 on one
// GPU (ZT_ZERO_KEEP_STAGE=1) fills the adapters' slices on the device; the optimizer offload
// (the adapters' state on the host) trains as the plain GPU run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/lora_device_run.h"
#include "common/cuda_tensor.h"
#include "common/small_run.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "model/lora_adapter.h"
#include "train/trainer.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

const std::string kBase = std::string(ZT_SOURCE_DIR) + "/tests/data/hf/llama3";

train::TrainResult lora_run(const fs::path& dir, const std::string& device, std::vector<std::string> extra = {}) {
  std::vector<std::string> lora{"--lora.target_modules", "q_proj,v_proj,down_proj"};
  lora.insert(lora.end(), extra.begin(), extra.end());
  return zt::testing::lora_device_run(dir, "llama3", device, lora);
}

using zt::testing::max_rel_diff;

}  // namespace

TEST(CudaLora, GpuRunTrainsAsTheCpuRunAndResumesOnTheCpu) {
  ZT_REQUIRE_GPU();
  const fs::path dir = zt::testing::fresh_test_dir("cuda_lora_", "f32");
  const train::TrainResult gpu = lora_run(dir, "cuda");
  const train::TrainResult cpu = lora_run(dir, "cpu");
  ASSERT_EQ(gpu.losses.size(), 6u);
  ASSERT_EQ(cpu.losses.size(), 6u);
  std::printf("[cuda-lora] f32 GPU vs CPU: max rel loss diff %.2e\n", max_rel_diff(gpu.losses, cpu.losses));
  EXPECT_LE(max_rel_diff(gpu.losses, cpu.losses), 1e-4);
  EXPECT_TRUE(fs::exists(fs::path(gpu.final_model_dir) / "adapter_model.safetensors"));
  // The GPU's step-3 checkpoint (adapters only) continues on the CPU.
  const std::string step3 = (dir / "cuda" / "run" / "checkpoints" / "global_step3").string();
  const train::TrainResult tail = lora_run(dir / "resumed", "cpu", {"--resume", step3});
  ASSERT_EQ(tail.losses.size(), 3u);
  EXPECT_LE(max_rel_diff(tail.losses, std::vector<double>(gpu.losses.begin() + 3, gpu.losses.end())), 1e-4);
  fs::remove_all(dir);
}

TEST(CudaLora, Bf16RunWritesAnF32PeftAdapter) {
  ZT_REQUIRE_GPU();
  const fs::path dir = zt::testing::fresh_test_dir("cuda_lora_", "bf16");
  const train::TrainResult r = lora_run(dir, "cuda", {"--bf16"});
  ASSERT_EQ(r.losses.size(), 6u);
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(r.losses.back(), r.losses.front());
  const io::SafetensorsReader f((fs::path(r.final_model_dir) / "adapter_model.safetensors").string());
  for (const std::string& name : f.names()) EXPECT_EQ(f.info(name).dtype, DType::F32) << name;
  const model::LoraAdapter a = model::load_lora_adapter(r.final_model_dir, model::load_hf_config(kBase));
  EXPECT_EQ(a.factors.size(), 6u);
  fs::remove_all(dir);
}

TEST(CudaLora, StageThreeOnOneGpuTrainsAsStageZero) {
  ZT_REQUIRE_GPU();
  const fs::path dir = zt::testing::fresh_test_dir("cuda_lora_", "stage3");
  const train::TrainResult s0 = lora_run(dir / "s0", "cuda", {"--max_steps", "3", "--save_interval", "0"});
  ::setenv("ZT_ZERO_KEEP_STAGE", "1", 1);
  const train::TrainResult s3 =
      lora_run(dir / "s3", "cuda", {"--max_steps", "3", "--save_interval", "0", "--zero_optimization.stage", "3"});
  ::unsetenv("ZT_ZERO_KEEP_STAGE");
  ASSERT_EQ(s3.losses.size(), 3u);
  EXPECT_LE(max_rel_diff(s3.losses, s0.losses), 1e-5);
  fs::remove_all(dir);
}

// ZeRO-Offload on the GPU with LoRA: the adapters' optimizer state on the host (stage 2;
// one process runs it as stage 0 with the host optimizer) trains as the plain GPU run.
TEST(CudaLora, OptimizerOffloadTrainsAsThePlainGpuRun) {
  ZT_REQUIRE_GPU();
  const fs::path dir = zt::testing::fresh_test_dir("cuda_lora_", "offload");
  const train::TrainResult plain = lora_run(dir / "plain", "cuda", {"--bf16", "--zero_optimization.stage", "2"});
  const train::TrainResult off =
      lora_run(dir / "off", "cuda",
               {"--bf16", "--zero_optimization.stage", "2", "--zero_optimization.offload_optimizer.device", "cpu"});
  ASSERT_EQ(off.losses.size(), plain.losses.size());
  std::printf("[cuda-lora] bf16 offload vs plain: max rel loss diff %.2e\n", max_rel_diff(off.losses, plain.losses));
  EXPECT_LE(max_rel_diff(off.losses, plain.losses), 1e-3);
  fs::remove_all(dir);
}
