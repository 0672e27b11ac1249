// Accepted keys with no effect on this device / world size: one warning each, naming the
// key; keys left at their defaults say nothing; CPU/NVMe offload on the GPU is loud
// ("no memory is saved"); the same keys over several ranks (where they act) are quiet.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "config/inert_keys.h"
#include "config/run_config.h"

namespace zt::train {
namespace {

const std::string kSeeds = std::string(ZT_SOURCE_DIR) + "/tests/data/seed-configs/";

std::vector<std::string> warnings_of(const std::vector<std::string>& args, int world = 1,
                                     const std::string& device = "cpu") {
  config::LoadOptions lo;
  lo.world_size = world;
  config::TrainConfig c = config::load_train_config(args, lo);
  c.device = device;
  return config::inert_key_warnings(c, world);
}

// How many warnings name `key` (as "key: ..." or "key <value>: ...").
int naming(const std::vector<std::string>& w, const std::string& key) {
  int n = 0;
  for (const std::string& s : w)
    n += s.rfind(key + ":", 0) == 0 || s.rfind(key + " ", 0) == 0 || s.rfind("!!! " + key, 0) == 0;
  return n;
}

std::string joined(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) s += x + "\n";
  return s;
}

TEST(InertKeys, DefaultsSayNothing) {
  EXPECT_TRUE(warnings_of({}).empty()) << joined(warnings_of({}));
  EXPECT_TRUE(warnings_of({}, 1, "cuda").empty());
  EXPECT_TRUE(warnings_of({"--bf16", "true"}).empty());
}

TEST(InertKeys, ZeroKeysOverOneProcessWarnOnceAndActOverSeveral) {
  const std::vector<std::string> args{"--zero_optimization.stage",
                                      "2",
                                      "--zero_optimization.overlap_comm",
                                      "true",
                                      "--zero_optimization.reduce_bucket_size",
                                      "1000",
                                      "--communication_data_type",
                                      "bf16"};
  const auto one = warnings_of(args);
  EXPECT_EQ(naming(one, "zero_optimization.stage"), 1) << joined(one);
  EXPECT_EQ(naming(one, "zero_optimization.overlap_comm"), 1) << joined(one);
  EXPECT_EQ(naming(one, "zero_optimization.reduce_bucket_size"), 1) << joined(one);
  EXPECT_EQ(naming(one, "communication_data_type"), 1) << joined(one);
  EXPECT_EQ(one.size(), 4u) << joined(one);
  EXPECT_TRUE(warnings_of(args, 2).empty()) << joined(warnings_of(args, 2));
  // Stage 3's own overlap_comm default (true) is not something the user wrote.
  EXPECT_EQ(naming(warnings_of({"--zero_optimization.stage", "3"}), "zero_optimization.overlap_comm"), 0);
}

// Optimizer offload to the CPU runs (zero/offload_optimizer.h): no warning on either
// device. Stage 3 with both offloads (parameters in host memory or on NVMe) runs on the
// GPU: no warning. offload_param without the
// optimizer's offload changes nothing there: loud, saying what it needs. On the CPU the
// parameters live in host memory anyway: named, not loud.
TEST(InertKeys, ParameterOffloadRunsWithTheOptimizersAndIsLoudAlone) {
  const std::vector<std::string> param{"--zero_optimization.stage", "3", "--zero_optimization.offload_param.device",
                                       "cpu"};
  std::vector<std::string> both = param;
  both.insert(both.end(), {"--zero_optimization.offload_optimizer.device", "cpu"});
  EXPECT_TRUE(warnings_of(both, 2, "cuda").empty()) << joined(warnings_of(both, 2, "cuda"));
  // One process too: stage 3 is kept (the host partitions are the point), so no stage warning.
  EXPECT_TRUE(warnings_of(both, 1, "cuda").empty()) << joined(warnings_of(both, 1, "cuda"));
  // With the optimizer's state on NVMe: the same.
  std::vector<std::string> nvme = param;
  nvme.insert(nvme.end(), {"--zero_optimization.offload_optimizer.device", "nvme",
                           "--zero_optimization.offload_optimizer.nvme_path", "/tmp/zt_nvme_inert"});
  EXPECT_TRUE(warnings_of(nvme, 1, "cuda").empty()) << joined(warnings_of(nvme, 1, "cuda"));
  // Parameters on NVMe with either optimizer offload run: no warning; alone they are loud
  // on the GPU and named on the CPU.
  std::vector<std::string> param_nvme{"--zero_optimization.stage", "3", "--zero_optimization.offload_param.device",
                                      "nvme", "--zero_optimization.offload_param.nvme_path", "/tmp/zt_nvme_inert"};
  std::vector<std::string> param_nvme_both = param_nvme;
  param_nvme_both.insert(param_nvme_both.end(), {"--zero_optimization.offload_optimizer.device", "cpu"});
  for (const char* device : {"cuda", "cpu"})
    EXPECT_TRUE(warnings_of(param_nvme_both, 1, device).empty()) << joined(warnings_of(param_nvme_both, 1, device));
  const auto nvme_alone_gpu = warnings_of(param_nvme, 2, "cuda");
  ASSERT_EQ(nvme_alone_gpu.size(), 1u) << joined(nvme_alone_gpu);
  EXPECT_EQ(nvme_alone_gpu[0].rfind("!!! zero_optimization.offload_param.device nvme", 0), 0u) << nvme_alone_gpu[0];
  const auto nvme_alone_cpu = warnings_of(param_nvme, 2, "cpu");
  EXPECT_EQ(naming(nvme_alone_cpu, "zero_optimization.offload_param.device nvme"), 1) << joined(nvme_alone_cpu);
  EXPECT_NE(joined(nvme_alone_cpu).find("offload_optimizer {device: cpu or nvme} at ratio 1"), std::string::npos);
  std::vector<std::string> half = both;
  half.insert(half.end(), {"--zero_optimization.offload_optimizer.ratio", "0.5"});
  for (const auto& args : {param, half}) {
    const auto gpu = warnings_of(args, 2, "cuda");
    ASSERT_EQ(gpu.size(), 1u) << joined(gpu);
    EXPECT_EQ(gpu[0].rfind("!!! zero_optimization.offload_param", 0), 0u) << gpu[0];
    EXPECT_NE(gpu[0].find("no memory is saved"), std::string::npos) << gpu[0];
    EXPECT_NE(gpu[0].find("offload_optimizer {device: cpu or nvme} at ratio 1"), std::string::npos) << gpu[0];
  }
  const auto cpu = warnings_of(both, 2, "cpu");
  EXPECT_EQ(naming(cpu, "zero_optimization.offload_optimizer.device"), 0) << joined(cpu);
  EXPECT_EQ(naming(cpu, "zero_optimization.offload_param.device"), 1) << joined(cpu);
  EXPECT_EQ(cpu.size(), 1u) << joined(cpu);
  EXPECT_EQ(joined(cpu).find("!!!"), std::string::npos);
}

TEST(InertKeys, ImplementationChoicesAndTopLevelKeysAreNamed) {
  const auto w = warnings_of({"--zero_optimization.stage", "1", "--zero_optimization.contiguous_gradients", "false",
                              "--zero_optimization.allgather_bucket_size", "1000", "--zero_optimization.sub_group_size",
                              "1000", "--zero_optimization.stage3_prefetch_bucket_size", "1000", "--prescale_gradients",
                              "true", "--dataloader_drop_last", "true", "--data_types.grad_accum_dtype", "fp32"},
                             2);
  for (const char* key : {"zero_optimization.contiguous_gradients", "zero_optimization.allgather_bucket_size",
                          "zero_optimization.sub_group_size", "zero_optimization.stage3_prefetch_bucket_size",
                          "prescale_gradients", "dataloader_drop_last", "data_types.grad_accum_dtype"})
    EXPECT_EQ(naming(w, key), 1) << key << "\n" << joined(w);
  EXPECT_EQ(w.size(), 7u) << joined(w);
}

// The seed configs as users bring them, on one CPU process.
TEST(InertKeys, SeedConfigsNameEachInertKeyOnce) {
  const auto ac = warnings_of({"--deepspeed", kSeeds + "ds_config_activation_checkpointing.json"});
  EXPECT_EQ(naming(ac, "activation_checkpointing.partition_activations"), 1) << joined(ac);
  EXPECT_EQ(naming(ac, "activation_checkpointing.contiguous_memory_optimization"), 1) << joined(ac);
  EXPECT_EQ(naming(ac, "zero_optimization.stage"), 1) << joined(ac);
  const auto nvme = warnings_of({"--deepspeed", kSeeds + "ds_config_nvme.json"});
  EXPECT_EQ(naming(nvme, "zero_optimization.offload_optimizer.device"), 0) << joined(nvme);  // it runs
  EXPECT_EQ(naming(nvme, "zero_optimization.offload_param.device"), 0) << joined(nvme);  // it runs too
  EXPECT_EQ(naming(nvme, "zero_optimization.stage"), 0) << joined(nvme);  // stage 3 kept for it
  EXPECT_EQ(naming(nvme, "aio"), 0) << joined(nvme);  // it tunes the swaps
  const auto big = warnings_of({"--deepspeed", kSeeds + "ds_config_zero3_large_batch.json"}, 8, "cuda");
  EXPECT_EQ(naming(big, "zero_optimization.offload_optimizer.device"), 0) << joined(big);  // it runs
  for (const std::string& w : big) EXPECT_EQ(naming(big, w.substr(0, w.find(':'))), 1) << w;
}

// Accelerate YAML keys that would change what Accelerate does, switched on: one warning
// each (in the config's warnings, which the run logs once); their defaults say nothing.
TEST(InertKeys, AccelerateKeysSwitchedOnSayTheyDoNothing) {
  zt::testing::TempDir dir(zt::testing::system_temp_path("zt_inert_"));
  const std::string on = dir.write("on.yaml",
                                   "distributed_type: MULTI_CPU\ndowncast_bf16: 'yes'\ndebug: true\n"
                                   "enable_cpu_affinity: true\nsame_network: true\nnum_processes: 1\n");
  const config::TrainConfig c = config::load_train_config({"--config_file", on});
  for (const char* key : {"downcast_bf16", "debug", "enable_cpu_affinity"})
    EXPECT_EQ(naming(c.warnings, on + ": " + key), 1) << key << "\n" << joined(c.warnings);
  EXPECT_EQ(c.warnings.size(), 3u) << joined(c.warnings);
  const std::string off = dir.write("off.yaml",
                                    "distributed_type: MULTI_CPU\ndowncast_bf16: 'no'\ndebug: false\n"
                                    "same_network: true\nnum_processes: 1\n");
  EXPECT_TRUE(config::load_train_config({"--config_file", off}).warnings.empty());
  // zero3_init_flag below stage 3.
  const std::string z = dir.write("z.yaml",
                                  "distributed_type: DEEPSPEED\nnum_processes: 1\ndeepspeed_config:\n"
                                  "  zero_stage: 2\n  zero3_init_flag: true\n");
  const auto w = warnings_of({"--config_file", z}, 2);
  EXPECT_EQ(naming(w, "zero3_init_flag"), 1) << joined(w);
}

}  // namespace
}  // namespace zt::train
