// `zerotrain train --deepspeed ds.json` (or --config_file accelerate.yaml) with no run file
// trains the built-in run (examples/default_run.yaml) with those DeepSpeed settings: the
// ds_config's batch sizes, optimizer, precision, stage and logging take the place of the
// built-in run's own, for every seed config users bring (tests/data/seed-configs).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/fixture_tokenizer.h"
#include "common/shell.h"
#include "common/temp_dir.h"

namespace fs = std::filesystem;
using zt::testing::sh;

namespace {

const std::string kSeeds = std::string(ZT_SOURCE_DIR) + "/tests/data/seed-configs/";

// Two steps of the built-in run, no sample; one output directory for the whole test so the
// built-in run's tokenizer is trained once and reused.
zt::testing::ShellResult train_with(const std::string& config_flags, const fs::path& out,
                                    const std::string& extra = "") {
  return sh(zt::testing::zerotrain_binary() + " train " + config_flags + " --max_steps 2 --steps_per_print 1 " +
            "--eval_batches 1 --samples.tokens 0 --threads 2 --output_dir " + out.string() + " " + extra);
}

}  // namespace

TEST(TrainBuiltinRun, EverySeedDsConfigTrainsTheBuiltInRun) {
  const fs::path out = zt::testing::fresh_test_dir("builtin_run_", "ds");
  struct Case {
    std::string file, extra, expect;  // expect: a piece of the log the config decides
  };
  const Case cases[] = {
      {"ds_config_debug.json", "", "batch 1 = micro 1 x accumulation 1 x world 1"},
      {"ds_config_zero3_offload_fp16.json", "", "fp16"},
      // A global batch of 4096 is 512 micro-batches of 128 tokens here: a smaller one keeps
      // the ds_config's accumulation of 8.
      {"ds_config_zero3_large_batch.json", "--train_batch_size 64", "batch 64 = micro 8 x accumulation 8 x world 1"},
      {"ds_config_nvme.json", "", "batch 8 = micro 4 x accumulation 2 x world 1"},
      {"ds_config_activation_checkpointing.json", "", "activation checkpointing on"},
  };
  for (const Case& c : cases) {
    const zt::testing::ShellResult r = train_with("--deepspeed " + kSeeds + c.file, out, c.extra);
    ASSERT_EQ(r.rc, 0) << c.file << ":\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.file << ":\n" << r.out;
    EXPECT_NE(r.out.find("step      2/2"), std::string::npos) << c.file << ":\n" << r.out;
    EXPECT_TRUE(fs::exists(out / "final" / "config.json")) << c.file;
    fs::remove_all(out / "final");
    fs::remove_all(out / "checkpoints");
    fs::remove(out / "metrics.jsonl");  // a new run into a directory holding a run exits 2
  }
  fs::remove_all(out);
}

TEST(TrainBuiltinRun, AnAccelerateYamlAloneTrainsTheBuiltInRun) {
  const fs::path out = zt::testing::fresh_test_dir("builtin_run_", "acc");
  const zt::testing::ShellResult r = train_with("--config_file " + kSeeds + "accelerate_deepspeed.yaml", out);
  ASSERT_EQ(r.rc, 0) << r.out;
  // The YAML's accumulation of 4 over the built-in run's micro-batch of 16, in fp16.
  EXPECT_NE(r.out.find("batch 64 = micro 16 x accumulation 4 x world 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp16"), std::string::npos) << r.out;
  fs::remove_all(out);
}

// A conflict the user wrote on the command line is still an error (exit 2).
TEST(TrainBuiltinRun, ACommandLineValueThatDisagreesWithTheDsConfigIsAnError) {
  const fs::path out = zt::testing::fresh_test_dir("builtin_run_", "conflict");
  const zt::testing::ShellResult r =
      train_with("--deepspeed " + kSeeds + "ds_config_debug.json", out, "--per_device_train_batch_size 4");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("train_micro_batch_size_per_gpu is 1"), std::string::npos) << r.out;
  fs::remove_all(out);
}

// Issue 40: a run named on the command line alone (no run file) took the built-in demo's
// settings, overwrite_output_dir: true among them, so a second such run deleted the first
// one's checkpoints. A command line that names a model or data now gets HF Trainer's
// defaults for the rest (lr 5e-5, batch 8, no warmup) and an existing run in output_dir is
// refused as for a run file; --model_name_or_path is HF's spelling of the model path.
TEST(TrainBuiltinRun, ACommandLineRunTakesHfDefaultsAndRefusesAnExistingRun) {
  const fs::path out = zt::testing::fresh_test_dir("builtin_run_", "cli");
  const fs::path work = zt::testing::fresh_test_dir("builtin_run_", "cli_work");
  const std::string text = std::string(ZT_SOURCE_DIR) + "/data/text/artistic.txt";
  const std::string cmd = zt::testing::zerotrain_binary() + " train --model_name_or_path " + ZT_SOURCE_DIR +
                          "/tests/data/hf/llama3 --model.tokenizer " + zt::testing::write_fixture_tokenizer(work) +
                          " --data.train " + text + " --data.validation " + text +
                          " --data.seq_len 16 --max_steps 2 --steps_per_print 1 --eval_batches 1 --threads 2"
                          " --output_dir " +
                          out.string();
  const zt::testing::ShellResult first = sh(cmd);
  ASSERT_EQ(first.rc, 0) << first.out;
  EXPECT_NE(first.out.find("batch 8 = micro 8 x accumulation 1 x world 1"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("5e-05"), std::string::npos) << first.out;
  EXPECT_EQ(first.out.find("tiny-gpt2"), std::string::npos) << first.out;
  ASSERT_TRUE(fs::exists(out / "checkpoints" / "global_step2" / "manifest.json"));
  const zt::testing::ShellResult second = sh(cmd);
  EXPECT_EQ(second.rc, 2) << second.out;
  EXPECT_NE(second.out.find("overwrite_output_dir"), std::string::npos) << second.out;
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "global_step2" / "manifest.json"));
  fs::remove_all(out);
  fs::remove_all(work);
}
