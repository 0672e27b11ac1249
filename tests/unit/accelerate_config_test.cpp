// Accelerate YAML: the seed config with inline DeepSpeed sections, YAML 1.1 scalars,
// launch keys, FSDP -> ZeRO, and the rule that a YAML naming a DeepSpeed JSON may not
// repeat the JSON's settings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/temp_dir.h"
#include "core/error.h"
#include "config/accelerate_config.h"
#include "config/run_config.h"

namespace zt::config {
namespace {

namespace fs = std::filesystem;

const std::string kSeeds = std::string(ZT_SOURCE_DIR) + "/tests/data/seed-configs/";

// A scratch directory removed at the end of the test.
// This file's per-test scratch directory: <system temp>/zt_acc_<gtest seed>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::system_temp_path("zt_acc_"), /*clear_first=*/false) {}
};

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::string load_error(const std::vector<std::string>& args) {
  try {
    load_train_config(args);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(AccelerateConfig, SeedYamlWithInlineDeepSpeedSections) {
  const TrainConfig c = load_train_config({"--config_file", kSeeds + "accelerate_deepspeed.yaml"});
  EXPECT_EQ(c.launch.distributed_type, "DEEPSPEED");
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::CPU);
  EXPECT_TRUE(c.zero.zero3_init);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  // YAML 1.1 reads 5e8 as a string: accepted where a number is expected.
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 1000000);
  EXPECT_EQ(c.grad_accum_steps, 4);
  EXPECT_FLOAT_EQ(c.gradient_clipping, 1.0f);
  EXPECT_EQ(c.precision, Precision::F16);  // the top-level fp16 block
  EXPECT_EQ(c.micro_batch_per_gpu, 8);     // "auto", as Accelerate fills it
  EXPECT_EQ(c.train_batch_size, 32);
}

TEST(AccelerateConfig, LaunchKeysAndWorldSize) {
  TempDir dir;
  const std::string y = dir.write("acc.yaml", R"(compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
mixed_precision: 'bf16'
num_processes: 8
num_machines: 2
machine_rank: 1
main_process_ip: 10.0.0.1
main_process_port: 29501
deepspeed_config:
  zero_stage: 2
  offload_optimizer_device: none
  gradient_accumulation_steps: 2
)");
  const TrainConfig c = load_train_config({"--config_file", y, "--per_device_train_batch_size", "4"});
  EXPECT_EQ(c.launch.num_processes, 8);
  EXPECT_EQ(c.launch.num_machines, 2);
  EXPECT_EQ(c.launch.machine_rank, 1);
  EXPECT_EQ(c.launch.main_process_ip, "10.0.0.1");
  EXPECT_EQ(c.launch.main_process_port, 29501);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.train_batch_size, 4 * 2 * 8);
  EXPECT_EQ(c.precision, Precision::BF16);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::None);
  // Overrides of Accelerate keys edit the YAML before it is read.
  const TrainConfig o =
      load_train_config({"--config_file", y, "--num_processes", "2", "--deepspeed_config.zero_stage", "1"});
  EXPECT_EQ(o.world_size, 2);
  EXPECT_EQ(o.zero.stage, 1);
  EXPECT_EQ(o.origin.at("deepspeed_config.zero_stage"), "command line");
  // No zero_stage anywhere: Accelerate's default, stage 2.
  const std::string d = dir.write("d.yaml", "distributed_type: DEEPSPEED\n");
  EXPECT_EQ(load_train_config({"--config_file", d}).zero.stage, 2);
}

// issue 19: `train --config_file` with num_processes 2 ran one process without a word.
TEST(AccelerateConfig, NumProcessesAgainstTheRunningJobIsNeverSilent) {
  TempDir dir;
  const std::string y = dir.write("acc.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\n");
  LoadOptions plain;
  plain.world_size = 1;
  plain.world_source = WorldSource::PlainProcess;
  try {
    load_train_config({"--config_file", y}, plain);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_HAS(e.what(), y + ": num_processes is 2, but this is one process started on its own");
    EXPECT_HAS(e.what(), "zerotrain launch --config_file " + y + " -- zerotrain train");
    EXPECT_HAS(e.what(), "--num_processes 1");
  }
  // Told on the command line, it agrees.
  EXPECT_EQ(load_train_config({"--config_file", y, "--num_processes", "1"}, plain).world_size, 1);
  // Under a launcher the job's size decides, with a warning.
  LoadOptions launched;
  launched.world_size = 4;
  const TrainConfig c = load_train_config({"--config_file", y}, launched);
  EXPECT_EQ(c.world_size, 4);
  ASSERT_FALSE(c.warnings.empty());
  EXPECT_HAS(c.warnings.back(), y + ": num_processes is 2 but the job runs 4 processes");
  // The same size: nothing to say.
  launched.world_size = 2;
  for (const std::string& w : load_train_config({"--config_file", y}, launched).warnings)
    EXPECT_EQ(w.find("num_processes"), std::string::npos) << w;
}

TEST(AccelerateConfig, RunFilesAccelerateConfigAndConfigFileMustAgree) {
  TempDir dir;
  const std::string a = dir.write("a.yaml", "distributed_type: DEEPSPEED\n");
  const std::string b = dir.write("b.yaml", "distributed_type: MULTI_CPU\n");
  const std::string run = dir.write("run.yaml", "accelerate_config: " + a + "\n");
  EXPECT_EQ(load_train_config({run, "--config_file", a}).zero.stage, 2);
  EXPECT_HAS(load_error({run, "--config_file", b}),
             run + ": accelerate_config names " + a + " but --config_file names " + b);
}

TEST(AccelerateConfig, JsonFileMayNotBeRepeatedInTheYaml) {
  TempDir dir;
  const std::string ds =
      dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})");
  const std::string ok =
      dir.write("ok.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: " + ds +
                               "\n  zero3_init_flag: false\nnum_processes: 1\n");
  const TrainConfig c = load_train_config({"--config_file", ok});
  EXPECT_EQ(c.zero.stage, 1);
  EXPECT_EQ(c.micro_batch_per_gpu, 2);
  // A relative deepspeed_config_file is found beside the YAML too.
  const std::string rel =
      dir.write("rel.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n");
  EXPECT_EQ(load_train_config({"--config_file", rel}).zero.stage, 1);

  const std::string dup = dir.write("dup.yaml",
                                    "distributed_type: DEEPSPEED\nmixed_precision: fp16\ndeepspeed_config:\n"
                                    "  deepspeed_config_file: " +
                                        ds +
                                        "\n  zero_stage: 3\n"
                                        "  gradient_accumulation_steps: 2\n");
  const std::string e = load_error({"--config_file", dup});
  EXPECT_HAS(e, "deepspeed_config.zero_stage");
  EXPECT_HAS(e, "deepspeed_config.gradient_accumulation_steps");
  EXPECT_HAS(e, "mixed_precision");
  EXPECT_HAS(e, "ds.json");
  // The same ambiguity with the JSON named on the command line and sections inline.
  const std::string e2 = load_error({"--config_file", kSeeds + "accelerate_deepspeed.yaml", "--deepspeed", ds});
  EXPECT_HAS(e2, "deepspeed_config.zero_optimization");
  EXPECT_HAS(e2, "fp16");
}

TEST(AccelerateConfig, Errors) {
  TempDir dir;
  const auto err = [&](const std::string& yaml) { return load_error({"--config_file", dir.write("e.yaml", yaml)}); };
  EXPECT_HAS(err("distributed_type: DEEPSPEED\nnum_procesess: 2\n"), "did you mean 'num_processes'");
  EXPECT_HAS(err("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stag: 2\n"), "did you mean 'zero_stage'");
  EXPECT_HAS(err("distributed_type: DEEPSPEDE\n"), "did you mean 'DEEPSPEED'");
  EXPECT_HAS(err("distributed_type: XLA\n"), "not supported");
  EXPECT_HAS(err("mixed_precision: fp8\n"), "fp8");
  EXPECT_HAS(err("distributed_type: MULTI_GPU\ndeepspeed_config:\n  zero_stage: 2\n"), "distributed_type: DEEPSPEED");
  EXPECT_HAS(err("num_processes: 3\nnum_machines: 2\n"), "split evenly");
  EXPECT_HAS(err("num_processes: two\n"), "expected a number");
  EXPECT_HAS(err("distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: disk\n"),
             "none, cpu, nvme");
  EXPECT_HAS(
      err("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  zero_optimization:\n    stage: 3\n"),
      "keep one of them");
  EXPECT_HAS(err("a: [1, 2\n"), "not valid YAML");
  EXPECT_HAS(err("compute_environment: AMAZON_SAGEMAKER\n"), "SageMaker");
}

TEST(AccelerateConfig, YamlScalarsAndNoMixedPrecision) {
  TempDir dir;
  // Unquoted `no` (YAML 1.1 false) and quoted 'no' both mean no mixed precision.
  for (const char* mp : {"no", "'no'"}) {
    const std::string y = dir.write("m.yaml", std::string("distributed_type: MULTI_CPU\nmixed_precision: ") + mp +
                                                  "\nuse_cpu: true\nnum_processes: 2\n");
    const TrainConfig c = load_train_config({"--config_file", y});
    EXPECT_EQ(c.precision, Precision::F32);
    EXPECT_EQ(c.world_size, 2);
    EXPECT_EQ(c.zero.stage, 0);
    EXPECT_EQ(c.device, "cpu");
  }
  const nlohmann::json j = parse_yaml_text("a: 5e8\nb: 5.0e+8\nc: 12\nd: '12'\ne: yes\nf: ~\n", "t.yaml");
  EXPECT_TRUE(j["a"].is_string());  // as PyYAML reads it
  EXPECT_TRUE(j["b"].is_number_float());
  EXPECT_TRUE(j["c"].is_number_integer());
  EXPECT_TRUE(j["d"].is_string());
  EXPECT_EQ(to_int(j["a"], {"t.yaml", "a"}), 500000000);
  EXPECT_TRUE(to_bool(j["e"], {"t.yaml", "e"}));
  EXPECT_TRUE(j["f"].is_null());
  EXPECT_THROW(to_int(nlohmann::json("1.5"), {"t.yaml", "x"}), Error);
}

TEST(AccelerateConfig, FsdpMapsOntoZero) {
  TempDir dir;
  const std::string y = dir.write("fsdp.yaml", R"(distributed_type: FSDP
fsdp_config:
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_offload_params: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_activation_checkpointing: true
)");
  const TrainConfig c = load_train_config({"--config_file", y});
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::CPU);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::CPU);
  EXPECT_FALSE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_TRUE(c.model.activation_checkpointing);
  const std::string g = dir.write("g.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 2\n");
  EXPECT_EQ(load_train_config({"--config_file", g}).zero.stage, 2);
  const std::string h =
      dir.write("h.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n");
  EXPECT_HAS(load_error({"--config_file", h}), "hybrid");
}

// The DeepSpeed JSON an Accelerate YAML names (deepspeed_config_file) is read by the same
// reader: a repeated key is refused naming that file; the YAML's own repeats as before.
TEST(AccelerateConfig, DuplicateKeysInTheNamedDeepSpeedJsonAreRefused) {
  TempDir dir;
  const std::string ds = dir.write("ds.json", R"({"gradient_clipping": 1.0, "gradient_clipping": 0.5})");
  const std::string acc = dir.write("acc.yaml",
                                    "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                                    "deepspeed_config:\n  deepspeed_config_file: " +
                                        ds + "\nnum_processes: 1\n");
  EXPECT_HAS(load_error({"--config_file", acc}), ds + ": key 'gradient_clipping' appears twice in one mapping");
  const std::string dup_yaml = dir.write("dup.yaml", "num_processes: 1\ndistributed_type: NO\nnum_processes: 2\n");
  EXPECT_HAS(load_error({"--config_file", dup_yaml}), "dup.yaml: key 'num_processes' appears twice");
}

}  // namespace
}  // namespace zt::config
