// LoRA's trained copies on the GPU (issue 20; runs on the GPU machine, skipped without one):
// GPT-2 with bias all (the trained biases filled on the host from the base's files, copied
// to the device, read by the block and the final norm) and Llama-3 with modules_to_save
// [lm_head] (the head's copy read by the loss), GPT-2 with copies of its tied wte and lm_head
// Llama-3 with embed_tokens' copy and Qwen2 with lora_only on k_proj alone (q/v biases held)
// train as the same runs on the CPU (f32: the
// same losses up to the kernels' summation order), and at ZeRO-3 on one GPU
// (ZT_ZERO_KEEP_STAGE=1: the copies' slices filled on the device) as at stage 0.
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
#include "train/trainer.h"

using namespace zt;
namespace fs = std::filesystem;

namespace {

using zt::testing::max_rel_diff;

}  // namespace

TEST(CudaLoraCopies, TrainedCopiesTrainAsOnTheCpu) {
  ZT_REQUIRE_GPU();
  struct Case {
    std::string name, base;
    std::vector<std::string> lora;
  };
  const std::vector<Case> cases{
      {"gpt2_bias_all", "gpt2", {"--lora.target_modules", "c_attn", "--lora.bias", "all"}},
      {"llama3_lm_head",
       "llama3",
       {"--lora.target_modules", "q_proj,v_proj", "--lora.modules_to_save", "[\"lm_head\"]"}},
      // the tied pair untied by copies of both: the embedding's copy takes the token rows'
      // gradient (the embedding backward into a trained unit), the head's the head's
      {"gpt2_tied_copies",
       "gpt2",
       {"--lora.target_modules", "c_attn", "--lora.modules_to_save", "[\"wte\", \"lm_head\"]"}},
      // k_proj's bias trained, q's and v's held (their gradient rows zeroed on the device)
      {"qwen2_lora_only_k", "qwen2", {"--lora.target_modules", "k_proj", "--lora.bias", "lora_only"}},
      {"llama3_embed_tokens",
       "llama3",
       {"--lora.target_modules", "q_proj", "--lora.modules_to_save", "[\"embed_tokens\"]"}}};
  for (const auto& [name, base, lora] : cases) {
    SCOPED_TRACE(name);
    const fs::path dir = zt::testing::fresh_test_dir("cuda_lora_copies_", name);
    const train::TrainResult gpu = zt::testing::lora_device_run(dir, base, "cuda", lora);
    const train::TrainResult cpu = zt::testing::lora_device_run(dir, base, "cpu", lora);
    ASSERT_EQ(gpu.losses.size(), 6u);
    ASSERT_EQ(cpu.losses.size(), 6u);
    std::printf("[cuda-lora-copies] %s f32 GPU vs CPU: max rel loss diff %.2e\n", name.c_str(),
                max_rel_diff(gpu.losses, cpu.losses));
    EXPECT_LE(max_rel_diff(gpu.losses, cpu.losses), 1e-4);
    std::vector<std::string> stage3 = lora;
    stage3.insert(stage3.end(), {"--zero_optimization.stage", "3"});
    ::setenv("ZT_ZERO_KEEP_STAGE", "1", 1);
    const train::TrainResult gpu3 = zt::testing::lora_device_run(dir / "stage3", base, "cuda", stage3);
    ::unsetenv("ZT_ZERO_KEEP_STAGE");
    ASSERT_EQ(gpu3.losses.size(), 6u);
    EXPECT_LE(max_rel_diff(gpu3.losses, gpu.losses), 1e-5);
    fs::remove_all(dir);
  }
}
