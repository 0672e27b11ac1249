// The config key tables (config/config_keys.h): the table agrees with the structs it fills
// and with docs/configs.md, every spelling it lists loads, origins in `config check` are
// the true ones, and named files must exist.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "common/input_error.h"
#include "common/temp_dir.h"
#include "config/config_dump.h"
#include "config/config_keys.h"
#include "config/config_paths.h"
#include "config/ds_config.h"
#include "config/run_config.h"
#include "config/scheduler_keys.h"

namespace zt::config {
namespace {

using nlohmann::json;
using zt::testing::input_error_of;

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::system_temp_path("zt_keys_"), /*clear_first=*/false) {}
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The lines of docs/configs.md between "<!-- zerotrain config keys --markdown SECTION -->"
// and the next "<!-- end generated -->".
std::string generated_block(const std::string& section) {
  const std::string doc = read_text(std::string(ZT_SOURCE_DIR) + "/docs/configs.md");
  const std::string begin = "<!-- zerotrain config keys --markdown " + section + " -->\n";
  const auto b = doc.find(begin);
  if (b == std::string::npos) return "(no generated block for " + section + " in docs/configs.md)";
  const auto e = doc.find("<!-- end generated -->", b);
  return doc.substr(b + begin.size(), e == std::string::npos ? std::string::npos : e - b - begin.size());
}

// The dump's line for `key` ("  key = value   [origin]").
std::string dump_line(const std::string& dump, const std::string& key) {
  const auto at = dump.find("  " + key + " = ");
  if (at == std::string::npos) return "(no line for " + key + ")";
  return dump.substr(at, dump.find('\n', at) - at);
}

TEST(ConfigKeys, ZeroTableDefaultsAreTheStructDefaults) {
  static const ZeroSection defaults{};
  for (const ZeroKey& k : zero_keys()) {
    if (std::holds_alternative<std::monostate>(k.target)) continue;
    EXPECT_EQ(key_value(k, defaults), k.default_value) << k.key;
  }
}

TEST(ConfigKeys, EverySpellingOfTheZeroTableLoadsWithItsDefault) {
  for (const ZeroKey& k : zero_keys()) {
    if (k.type != KeyType::Bool && k.type != KeyType::Int) continue;
    const json value = k.type == KeyType::Bool ? json(k.default_value != 0) : json(saturating_int64(k.default_value));
    std::vector<std::string> spellings = k.aliases;
    spellings.push_back(k.key);
    for (const std::string& s : spellings) {
      const DsConfig ds = parse_ds_config(json{{"zero_optimization", {{s, value}}}}, "ds.json");
      EXPECT_EQ(key_value(k, ds.zero), k.default_value) << s;
      EXPECT_EQ(ds.zero_given.at(k.key), Given::Set) << s;
    }
  }
}

TEST(ConfigKeys, CheckpointingTableDefaultsAreTheStructDefaults) {
  static const ActivationCheckpointingSection defaults{};  // static: no padding read as "uninitialised"
  for (const CheckpointingKey& k : checkpointing_keys()) EXPECT_EQ(key_value(k, defaults), k.default_value) << k.key;
  const DsConfig ds =
      parse_ds_config(json{{"activation_checkpointing", {{"number_checkpoints", 4}, {"profile", true}}}}, "ds.json");
  EXPECT_EQ(ds.activation_checkpointing.number_checkpoints, 4);
  EXPECT_TRUE(ds.activation_checkpointing.profile);
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"activation_checkpointing", {{"number_checkpoints", -1}}}}, "ds.json");
             }),
             "ds.json: activation_checkpointing.number_checkpoints: must not be negative");
}

TEST(ConfigKeys, AioTableDefaultsAreTheStructDefaultsAndItsChecksHold) {
  static const AioSection defaults{};
  for (const AioKey& k : aio_keys()) EXPECT_EQ(key_value(k, defaults), k.default_value) << k.key;
  const DsConfig ds = parse_ds_config(json{{"aio", {{"thread_count", 3}, {"block_size", 4096}}}}, "ds.json");
  EXPECT_EQ(ds.aio.intra_op_parallelism, 3);
  EXPECT_EQ(ds.aio.block_size, 4096);
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"aio", {{"queue_depth", 0}}}}, "ds.json");
             }),
             "ds.json: aio.queue_depth: must be positive");
  try {
    parse_ds_config(json{{"aio", {{"use_gds", true}}}}, "ds.json");
    ADD_FAILURE() << "use_gds: true loaded";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "aio.use_gds: GPUDirect Storage is not supported");
  }
}

TEST(ConfigKeys, ZeroValuesReachTheEngineOptionsWithoutACopy) {
  const TrainConfig c =
      load_train_config({"--zero_optimization.stage", "3", "--zero_optimization.prefetch_bucket_size", "123",
                         "--zero_optimization.stage3_max_live_parameters", "456", "--communication_data_type", "bf16"});
  const zero::ZeroOptions& o = c.zero;  // what training_run hands the engine
  EXPECT_EQ(o.stage, 3);
  EXPECT_EQ(o.stage3_prefetch_bucket_size, 123);
  EXPECT_EQ(o.stage3_max_live_parameters, 456);
  EXPECT_EQ(o.overlap_comm, zero::OverlapComm::On);  // stage 3's default
  ASSERT_TRUE(o.communication_dtype.has_value());
  EXPECT_EQ(*o.communication_dtype, DType::BF16);
}

TEST(ConfigKeys, ZeroAutoSizesComeFromTheHiddenSize) {
  TempDir dir;
  const std::string ds = dir.write("ds.json", R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})");
  const TrainConfig c = load_train_config({"--deepspeed", ds, "--model.preset", "tiny-gpt2"});
  EXPECT_EQ(c.zero.reduce_bucket_size, 128 * 128);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, static_cast<int64_t>(0.9 * 128 * 128));
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 1280);
  EXPECT_EQ(c.origin.at("zero_optimization.reduce_bucket_size"), "auto (hidden size 128)");
}

TEST(ConfigKeys, DocsTablesAreTheGeneratedOnes) {
  EXPECT_EQ(generated_block("zero_optimization"), zero_keys_markdown())
      << "docs/configs.md's zero_optimization table differs from the key table: paste `zerotrain config keys "
         "--markdown zero_optimization` between its markers";
  EXPECT_EQ(generated_block("activation_checkpointing"), checkpointing_keys_markdown())
      << "docs/configs.md's activation_checkpointing table differs from the key table: paste `zerotrain config keys "
         "--markdown activation_checkpointing` between its markers";
  EXPECT_EQ(generated_block("aio"), aio_keys_markdown())
      << "docs/configs.md's aio table differs from the key table: paste `zerotrain config keys --markdown aio` "
         "between its markers";
  EXPECT_EQ(generated_block("top"), top_level_keys_markdown())
      << "docs/configs.md's top-level table differs from the key table: paste `zerotrain config keys --markdown top` "
         "between its markers";
  EXPECT_EQ(generated_block("optimizer"), optimizer_param_keys_markdown())
      << "docs/configs.md's optimizer params table differs from the key table: paste `zerotrain config keys "
         "--markdown optimizer` between its markers";
  EXPECT_EQ(generated_block("scheduler"), scheduler_param_keys_markdown())
      << "docs/configs.md's scheduler params table differs from the key table: paste `zerotrain config keys "
         "--markdown scheduler` between its markers";
  EXPECT_EQ(generated_block("fp16"), fp16_keys_markdown())
      << "docs/configs.md's fp16 table differs from the key table: paste `zerotrain config keys --markdown fp16` "
         "between its markers";
  EXPECT_EQ(generated_block("bf16"), bf16_keys_markdown())
      << "docs/configs.md's bf16 table differs from the key table: paste `zerotrain config keys --markdown bf16` "
         "between its markers";
  EXPECT_EQ(generated_block("accelerate"), accelerate_keys_markdown())
      << "docs/configs.md's Accelerate table differs from the key table: paste `zerotrain config keys --markdown "
         "accelerate` between its markers";
  EXPECT_EQ(generated_block("accelerate.deepspeed_config"), accelerate_deepspeed_keys_markdown())
      << "docs/configs.md's deepspeed_config table differs from the key table: paste `zerotrain config keys "
         "--markdown accelerate.deepspeed_config` between its markers";
  EXPECT_EQ(generated_block("run"), run_keys_markdown())
      << "docs/configs.md's run config table differs from the key table: paste `zerotrain config keys --markdown "
         "run` between its markers";
}

TEST(ConfigKeys, PrecisionTableDefaultsAreTheStructDefaults) {
  static const Fp16Section fp16{};
  static const Bf16Section bf16{};
  for (const Fp16Key& k : fp16_keys()) EXPECT_EQ(key_value(k, fp16), k.default_value) << "fp16." << k.key;
  for (const Bf16Key& k : bf16_keys()) EXPECT_EQ(key_value(k, bf16), k.default_value) << "bf16." << k.key;
  // The engine's loss scaler defaults are the table's: the section is the engine's struct.
  static const zero::LossScalerConfig engine{};
  EXPECT_EQ(engine.initial_scale_power, fp16.initial_scale_power);
  EXPECT_EQ(engine.loss_scale_window, fp16.loss_scale_window);
}

// Every resolved fp16 key read from a file lands in its field (a value unlike its default),
// is recorded as written, and reaches the resolved TrainConfig the loss scaler is made from.
TEST(ConfigKeys, EveryFp16KeyIsReadIntoItsField) {
  const json fp16 = {{"enabled", true},         {"loss_scale", 128.5}, {"initial_scale_power", 12},
                     {"loss_scale_window", 50}, {"hysteresis", 3},     {"consecutive_hysteresis", true},
                     {"min_loss_scale", 0.25},  {"auto_cast", true}};
  const DsConfig ds = parse_ds_config(json{{"fp16", fp16}}, "ds.json");
  for (const Fp16Key& k : fp16_keys()) {
    if (!fp16.contains(k.key)) continue;
    const double want = fp16[k.key].is_boolean() ? (fp16[k.key].get<bool>() ? 1 : 0) : fp16[k.key].get<double>();
    EXPECT_EQ(key_value(k, ds.fp16), want) << k.key;
    EXPECT_EQ(ds.fp16_given.at(k.key), Given::Set) << k.key;
  }
  EXPECT_TRUE(ds.fp16_enabled().is_set());
  // "auto" is taken for enabled only, and decided by the run.
  EXPECT_TRUE(parse_ds_config(json{{"fp16", {{"enabled", "auto"}}}}, "ds.json").fp16_enabled().is_auto());
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"fp16", {{"hysteresis", "auto"}}}}, "ds.json");
             }),
             "fp16.hysteresis");
}

TEST(ConfigKeys, PrecisionSectionsCheckTheirRanges) {
  auto error_for = [](json section, const char* name = "fp16") {
    return input_error_of([&] { parse_ds_config(json{{name, section}}, "ds.json"); });
  };
  EXPECT_HAS(error_for({{"min_loss_scale", 0}}), "ds.json: fp16.min_loss_scale: must be positive");
  EXPECT_HAS(error_for({{"loss_scale_window", 0}}), "ds.json: fp16.loss_scale_window: must be positive");
  EXPECT_HAS(error_for({{"hysteresis", 0}}), "ds.json: fp16.hysteresis: must be positive");
  EXPECT_HAS(error_for({{"loss_scale", -1}}), "fp16.loss_scale: must be 0 (dynamic) or a positive static scale");
  EXPECT_HAS(error_for({{"initial_scale_power", 65}}), "fp16.initial_scale_power: must be in 0..64");
  EXPECT_HAS(error_for({{"loss_scal", 1}}), "did you mean 'loss_scale'");
  EXPECT_HAS(error_for({{"check_grad_overflw", true}}, "bf16"), "did you mean 'check_grad_overflow'");
  for (const auto& [section, key] :
       std::vector<std::pair<const char*, const char*>>{{"fp16", "fp16_master_weights_and_grads"},
                                                        {"bf16", "bf16_master_weights_and_grads"},
                                                        {"bf16", "bf16_optimizer_states"}}) {
    try {
      parse_ds_config(json{{section, {{key, true}}}}, "ds.json");
      ADD_FAILURE() << key << ": true loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << key;
      EXPECT_HAS(e.what(), std::string(section) + "." + key + ": ");
      EXPECT_HAS(e.what(), "is not supported by zerotrain");
    }
    EXPECT_NO_THROW(parse_ds_config(json{{section, {{key, false}}}}, "ds.json")) << key;
  }
  // bfloat16 is bf16's alias, read by the same table.
  EXPECT_FALSE(
      parse_ds_config(json{{"bfloat16", {{"check_grad_overflow", false}}}}, "ds.json").bf16.check_grad_overflow);
}

// The top level's scalars are read from their rows into DsTopLevel, with how each was
// written; every row's spelling is a known key.
TEST(ConfigKeys, TopLevelScalarsAreReadFromTheirRows) {
  static const DsTopLevel defaults{};
  for (const TopKey& k : top_level_keys()) EXPECT_EQ(key_value(k, defaults), k.default_value) << k.key;
  const DsConfig ds = parse_ds_config(json{{"train_batch_size", 32},
                                           {"train_micro_batch_size_per_gpu", "auto"},
                                           {"gradient_clipping", 0.3},
                                           {"steps_per_print", 5},
                                           {"seed", 7},
                                           {"wall_clock_breakdown", true},
                                           {"gradient_predivide_factor", 2.0},
                                           {"sequence_parallel_size", 1},
                                           {"sparse_gradients", false}},
                                      "ds.json");
  EXPECT_EQ(ds.train_batch_size().value, 32);
  EXPECT_TRUE(ds.train_batch_size().is_set());
  EXPECT_TRUE(ds.micro_batch().is_auto());
  EXPECT_TRUE(ds.grad_accum().is_absent());
  EXPECT_EQ(ds.gradient_clipping().value, 0.3);  // a double: equal to an HF max_grad_norm of 0.3
  EXPECT_EQ(ds.steps_per_print().value, 5);
  EXPECT_EQ(ds.seed().value, 7);
  EXPECT_TRUE(ds.top.wall_clock_breakdown);
  EXPECT_EQ(ds.top.gradient_predivide_factor, 2.0);
  for (const std::string& key : ds_top_level_keys()) {
    const bool in_table = std::any_of(top_level_keys().begin(), top_level_keys().end(), [&](const TopKey& k) {
      return k.key == key || std::find(k.aliases.begin(), k.aliases.end(), key) != k.aliases.end();
    });
    EXPECT_TRUE(in_table) << key;
  }
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"train_batch_size", 0}}, "ds.json");
             }),
             "ds.json: train_batch_size: must be positive");
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"gradient_clipping", -1}}, "ds.json");
             }),
             "ds.json: gradient_clipping: must not be negative");
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"zero_optimisation", {}}}, "ds.json");
             }),
             "did you mean 'zero_optimization'");
  for (const auto& [key, value] :
       std::vector<std::pair<const char*, json>>{{"sparse_gradients", true}, {"sequence_parallel_size", 2}}) {
    try {
      parse_ds_config(json{{key, value}}, "ds.json");
      ADD_FAILURE() << key << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << key;
      EXPECT_HAS(e.what(), std::string("ds.json: ") + key + ": ");
    }
  }
}

// Each optimizer type takes exactly its rows' params: a param of another type is an
// unknown key (with did-you-mean), and every param the type takes is read into its field.
TEST(ConfigKeys, OptimizerParamsComeFromTheirRowsPerType) {
  static const OptimizerParams defaults{};
  for (const OptimizerParamKey& k : optimizer_param_keys()) {
    if (std::holds_alternative<std::monostate>(k.row.target)) continue;
    EXPECT_EQ(key_value(k.row, defaults), k.row.default_value) << k.row.key;
  }
  const DsConfig sgd = parse_ds_config(
      json{{"optimizer",
            {{"type", "SGD"},
             {"params", {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.01}}}}}},
      "ds.json");
  EXPECT_EQ(sgd.lr().value, 0.1);
  EXPECT_TRUE(sgd.lr().is_set());
  EXPECT_EQ(sgd.params.momentum, 0.9);
  EXPECT_EQ(sgd.params.dampening, 0.1);
  EXPECT_EQ(sgd.weight_decay().value, 0.01);
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"optimizer", {{"type", "SGD"}, {"params", {{"eps", 1e-8}}}}}}, "ds.json");
             }),
             "optimizer.params.eps: unknown key 'eps'");
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"optimizer", {{"type", "AdamW"}, {"params", {{"weight_decy", 0.1}}}}}}, "ds.json");
             }),
             "did you mean 'weight_decay'");
  EXPECT_HAS(input_error_of([] {
               parse_ds_config(json{{"optimizer", {{"type", "Adam"}, {"params", {{"lr", -1}}}}}}, "ds.json");
             }),
             "ds.json: optimizer.params.lr: must not be negative");
  const DsConfig adam = parse_ds_config(
      json{{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}, {"adam_w_mode", false}, {"fused", true}}}}}},
      "ds.json");
  EXPECT_TRUE(adam.lr().is_auto());
  EXPECT_TRUE(adam.params.adam_w_mode);  // AdamW is decoupled whatever the flag says
  try {
    parse_ds_config(json{{"optimizer", {{"type", "Adam"}, {"params", {{"amsgrad", true}}}}}}, "ds.json");
    ADD_FAILURE() << "amsgrad: true loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_HAS(e.what(), "optimizer.params.amsgrad: AMSGrad is not supported");
  }
  EXPECT_EQ(parse_ds_config(json{{"optimizer", {{"type", "Lion"}}}}, "ds.json").beta2.value, 0.99);
}

TEST(ConfigKeys, RunTableSpellingsAreAccepted) {
  for (const RunKey& k : run_keys()) EXPECT_EQ(canonical_run_key(k.key), k.key);
  EXPECT_EQ(canonical_run_key("save_steps"), "save_interval");
  EXPECT_EQ(canonical_run_key("model_name_or_path"), "model.path");
  EXPECT_EQ(run_origin_key("model.path"), "model");
  for (const char* top : {"model", "data", "samples", "num_train_epochs", "logging_steps", "seq_len"})
    EXPECT_NE(std::find(run_top_level_keys().begin(), run_top_level_keys().end(), top), run_top_level_keys().end())
        << top;
}

// Issue 16: `model.tokenizer = tok512.json [default]` when run.yaml set it.
TEST(ConfigCheckOrigins, KeysWrittenInTheRunConfigNameIt) {
  TempDir dir;
  dir.write("tok512.json", "{}");
  const std::string run = dir.write("run.yaml",
                                    "model:\n  preset: tiny-gpt2\n  tokenizer: tok512.json\n"
                                    "eval_steps: 5\nsave_strategy: \"no\"\nwarmup_steps: 3\n");
  const TrainConfig c = load_train_config({run});
  EXPECT_EQ(c.origin.at("model.tokenizer"), run);
  EXPECT_EQ(c.origin.at("model"), run);
  EXPECT_EQ(c.origin.at("eval_interval"), run);  // written as its alias
  EXPECT_EQ(c.origin.at("save_strategy"), run);
  EXPECT_EQ(c.origin.at("warmup_steps"), run);
  const std::string dump = describe_config(c);
  EXPECT_HAS(dump_line(dump, "model.tokenizer"), "[" + run + "]");
  EXPECT_HAS(dump_line(dump, "eval_interval"), "[" + run + "]");
}

// Issue 16: `--save_steps 2` showed as `save_interval = 2 [default]`.
TEST(ConfigCheckOrigins, AnAliasOnTheCommandLineNamesTheCanonicalKey) {
  const TrainConfig c = load_train_config({"--save_steps", "2", "--model_name_or_path", "/x", "--logging_steps", "3"});
  EXPECT_EQ(c.save_interval, 2);
  EXPECT_EQ(c.origin.at("save_interval"), "command line");
  EXPECT_EQ(c.origin.at("model"), "command line");
  EXPECT_EQ(c.origin.at("steps_per_print"), "command line");
  EXPECT_HAS(dump_line(describe_config(c), "save_interval"), "= 2");
  EXPECT_HAS(dump_line(describe_config(c), "save_interval"), "[command line]");
}

TEST(ConfigCheckOrigins, ZeroKeysWrittenInTheDsConfigNameIt) {
  TempDir dir;
  const std::string ds = dir.write("ds.json", R"({"zero_optimization": {"contiguous_gradients": false}})");
  const TrainConfig c = load_train_config({"--deepspeed", ds});
  EXPECT_EQ(c.origin.at("zero_optimization.contiguous_gradients"), ds);
  EXPECT_EQ(c.origin.at("zero_optimization.stage"), "default");  // the section does not write it
  EXPECT_EQ(c.origin.at("zero_optimization.overlap_comm"), "default (true for stage 3)");
}

// Issue 16: `config check --model.path /nonexistent --data.train /nope` said `config OK`.
TEST(ConfigCheckPaths, AMissingModelDirectoryIsNamed) {
  const TrainConfig c = load_train_config({"--model.path", "/nonexistent", "--data.train", "/nope"});
  const std::string e = input_error_of([&] { check_named_paths(c); });
  EXPECT_HAS(e, "model.path");
  EXPECT_HAS(e, "/nonexistent");
  EXPECT_HAS(e, "command line");
}

TEST(ConfigCheckPaths, MissingDataAndTokenizerAreNamed) {
  TempDir dir;
  const std::string run = dir.write("run.yaml", "model:\n  preset: tiny-gpt2\n  tokenizer: missing_tok.json\n");
  // Named where the rule looks for it: beside the run file.
  EXPECT_HAS(input_error_of([&] { check_named_paths(load_train_config({run})); }),
             "model.tokenizer: '" + dir.file("missing_tok.json") + "'");
  EXPECT_HAS(input_error_of([&] {
               check_named_paths(load_train_config({"--data.train", "/nope"}));
             }),
             "data.train: '/nope' does not exist");
  EXPECT_HAS(input_error_of([&] {
               check_named_paths(load_train_config({"--data.validation", "/nope_val"}));
             }),
             "data.validation: '/nope_val'");
}

TEST(ConfigCheckPaths, ExistingPathsAndGlobsPass) {
  TempDir dir;
  dir.write("a.bin", "");
  dir.write("t.txt", "hello");
  const std::string glob = (dir.path() / "*.bin").string();
  EXPECT_NO_THROW(check_named_paths(load_train_config({"--data.train", glob, "--data.validation", dir.file("t.txt")})));
  EXPECT_NO_THROW(check_named_paths(load_train_config({})));  // the built-in run names no files
}

}  // namespace
}  // namespace zt::config
