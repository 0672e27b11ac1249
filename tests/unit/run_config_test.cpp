// Run config + load_train_config: sections, HF-style keys and aliases, paths named
// inside the run config, command-line overrides routed to the right document, and the
// resolved-config dump with origins.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "backend/cuda_api.h"
#include "common/temp_dir.h"
#include "core/error.h"
#include "config/config_dump.h"
#include "config/config_value.h"
#include "config/run_config.h"

namespace zt::config {
namespace {

namespace fs = std::filesystem;

// This file's per-test scratch directory: <system temp>/zt_run_<gtest seed>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::system_temp_path("zt_run_"), /*clear_first=*/false) {}
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

TEST(RunConfig, NoArgumentsGiveTheDefaults) {
  const TrainConfig c = load_train_config({});
  EXPECT_EQ(c.source, "defaults");
  EXPECT_EQ(c.model.preset, "tiny-gpt2");
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.precision, Precision::F32);
  EXPECT_EQ(c.micro_batch_per_gpu, 8);
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.hf_scheduler, "linear");
  // device auto: the GPU when one is visible (and the build has the CUDA backend).
  EXPECT_EQ(c.device, zt::cuda::available() ? "cuda" : "cpu");
  EXPECT_EQ(load_train_config({"--device", "cpu"}).device, "cpu");
  EXPECT_EQ(load_train_config({"--device", "auto"}).device, c.device);
}

TEST(RunConfig, FullYaml) {
  TempDir dir;
  const std::string y = dir.write("run.yaml", R"(model:
  preset: tiny-llama
  activation_checkpointing: true
data:
  train: [a.jsonl, b.txt]
  validation: val.txt
  jsonl_field: content
  seq_len: 64
max_steps: 50
eval_interval: 10
eval_batches: 4
save_interval: 25
keep_last: 3
output_dir: runs/x
seed: 7
logging_steps: 5
resume: latest
samples:
  prompts: ["Once", "The"]
  tokens: 20
  temperature: 0.7
  top_k: 10
learning_rate: 3e-4
per_device_train_batch_size: 4
gradient_accumulation_steps: 2
warmup_ratio: 0.1
lr_scheduler_type: cosine
weight_decay: 0.1
max_grad_norm: 0.5
adam_beta2: 0.95
bf16: true
)");
  const TrainConfig c = load_train_config({y});
  EXPECT_EQ(c.model.preset, "tiny-llama");
  EXPECT_TRUE(c.model.activation_checkpointing);
  // Relative to the run file (the one rule for paths written in a file).
  EXPECT_EQ(c.data.train, (std::vector<std::string>{dir.file("a.jsonl"), dir.file("b.txt")}));
  EXPECT_EQ(c.data.validation, (std::vector<std::string>{dir.file("val.txt")}));
  EXPECT_EQ(c.data.jsonl_field, "content");
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_EQ(c.max_steps, 50);
  EXPECT_EQ(c.eval_interval, 10);
  EXPECT_EQ(c.eval_batches, 4);
  EXPECT_EQ(c.save_interval, 25);
  EXPECT_EQ(c.keep_last, 3);
  EXPECT_EQ(c.output_dir, "runs/x");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.steps_per_print, 5);  // logging_steps alias
  EXPECT_EQ(c.resume, "latest");
  EXPECT_EQ(c.sample_prompts.size(), 2u);
  EXPECT_EQ(c.sample_tokens, 20);
  EXPECT_FLOAT_EQ(c.sample_temperature, 0.7f);
  EXPECT_EQ(c.sample_top_k, 10);
  EXPECT_FLOAT_EQ(c.optimizer.lr, 3e-4f);  // "3e-4": a YAML 1.1 string, read as a number
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.1f);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.95f);
  EXPECT_EQ(c.micro_batch_per_gpu, 4);
  EXPECT_EQ(c.grad_accum_steps, 2);
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.hf_scheduler, "cosine");
  EXPECT_EQ(c.warmup_steps, 5);  // ceil(0.1 * 50)
  EXPECT_FLOAT_EQ(c.gradient_clipping, 0.5f);
  EXPECT_EQ(c.precision, Precision::BF16);
}

TEST(RunConfig, JsonRunConfigNamingDeepSpeedAndOverrides) {
  TempDir dir;
  dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 2}})");
  // The run config names the ds_config relative to itself.
  const std::string run = dir.write("run.json", R"({"deepspeed": "ds.json", "max_steps": 100, "warmup_steps": 10,
                                                  "per_device_train_batch_size": 2})");
  const TrainConfig c =
      load_train_config({run, "--optimizer.params.lr", "3e-4", "--max_steps=20", "--zero_optimization.stage", "3",
                         "--gradient_accumulation_steps", "4", "--data.seq_len", "32"});
  EXPECT_FLOAT_EQ(c.optimizer.lr, 3e-4f);
  EXPECT_EQ(c.max_steps, 20);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.grad_accum_steps, 4);  // the ds_config sets it, so the override edits the ds_config
  EXPECT_EQ(c.micro_batch_per_gpu, 2);
  EXPECT_EQ(c.data.seq_len, 32);
  EXPECT_EQ(c.scheduler["params"]["total_num_steps"].get<int64_t>(), 20);
  EXPECT_EQ(c.scheduler["params"]["warmup_num_steps"].get<int64_t>(), 10);
  EXPECT_EQ(c.origin.at("optimizer.params.lr"), "command line");
  EXPECT_EQ(c.origin.at("max_steps"), "command line");
  const std::string text = describe_config(c);
  EXPECT_HAS(text, "optimizer.params.lr = 0.0003");
  EXPECT_HAS(text, "[command line]");
  EXPECT_HAS(text, "zero_optimization.stage = 3");

  // Mismatch between an explicit run value and an explicit ds value.
  EXPECT_HAS(load_error({run, "--learning_rate", "1e-3"}), "optimizer.params.lr");
  // A ds scheduler and an HF schedule at once are ambiguous.
  EXPECT_HAS(load_error({run, "--lr_scheduler_type", "cosine"}), "scheduler block");
}

TEST(RunConfig, EpochRunsGetTheirTotalLater) {
  TempDir dir;
  const std::string ds = dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 1,
    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "auto", "warmup_num_steps": "auto"}}})");
  TrainConfig c = load_train_config({"--deepspeed", ds, "--epochs", "2", "--warmup_ratio", "0.25"});
  EXPECT_EQ(c.max_steps, 0);
  EXPECT_EQ(c.scheduler["params"]["total_num_steps"], "auto");
  set_total_steps(c, 40);
  EXPECT_EQ(c.scheduler["params"]["total_num_steps"].get<int64_t>(), 40);
  EXPECT_EQ(c.scheduler["params"]["warmup_num_steps"].get<int64_t>(), 10);
  EXPECT_EQ(c.warmup_steps, 10);
}

TEST(RunConfig, OverridesWithoutFilesAndOtherDocuments) {
  // A ds_config key with no ds_config given creates one from the command line.
  const TrainConfig c = load_train_config({"--zero_optimization.stage", "1", "--bf16", "--mixed_precision", "bf16",
                                           "--optimizer.type", "sgd", "--optimizer.params.momentum", "0.9"});
  EXPECT_EQ(c.zero.stage, 1);
  EXPECT_EQ(c.precision, Precision::BF16);
  EXPECT_EQ(c.optimizer.type, zero::OptimizerType::SGD);
  EXPECT_FLOAT_EQ(c.optimizer.momentum, 0.9f);
  // fp16/bf16: a run switch, or the ds block when it exists or the key is nested.
  TempDir dir;
  const std::string ds = dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": false}})");
  EXPECT_EQ(load_train_config({"--deepspeed", ds, "--bf16"}).precision, Precision::BF16);
  EXPECT_EQ(load_train_config({"--fp16.enabled", "true"}).precision, Precision::F16);
  EXPECT_EQ(load_train_config({"--fp16.enabled", "true"}).origin.at("fp16.enabled"), "command line");
  // --optimizer.params.* alone creates an AdamW block.
  const TrainConfig a = load_train_config({"--optimizer.params.lr", "3e-4"});
  EXPECT_EQ(a.optimizer.type, zero::OptimizerType::AdamW);
  EXPECT_FLOAT_EQ(a.optimizer.lr, 3e-4f);
  EXPECT_HAS(load_error({"--max_step", "3"}), "did you mean 'max_steps'");
  EXPECT_HAS(load_error({"--zero_optimization.stagee", "3"}), "did you mean 'stage'");
  EXPECT_HAS(load_error({"--max_steps", "abc"}), "max_steps: expected a number");
  EXPECT_HAS(load_error({"--bf16", "true", "--fp16", "true"}), "both true");
  EXPECT_HAS(load_error({"--max_steps", "3", "--max_steps.x", "1"}), "not a mapping");
  EXPECT_HAS(load_error({"a.yaml", "b.yaml"}), "only one run config");
  EXPECT_HAS(load_error({"/nonexistent/run.yaml"}), "cannot open");
  EXPECT_HAS(load_error({"--deepspeed"}), "needs a file path");
}

// A command-line value is JSON, a YAML flow list or mapping as a run file writes it, or a
// plain string.
TEST(RunConfig, CommandLineValuesAreJsonOrYamlFlowOrStrings) {
  EXPECT_EQ(parse_override_value("3e-4"), nlohmann::json(3e-4));
  EXPECT_EQ(parse_override_value("[\"wte\", \"lm_head\"]"), nlohmann::json({"wte", "lm_head"}));
  EXPECT_EQ(parse_override_value("[wte, lm_head]"), nlohmann::json({"wte", "lm_head"}));
  EXPECT_EQ(parse_override_value(" {r: 8} ")["r"], 8);
  EXPECT_EQ(parse_override_value("[a, b"), nlohmann::json("[a, b"));  // not a flow list: the string
  EXPECT_EQ(parse_override_value("q_proj,v_proj"), nlohmann::json("q_proj,v_proj"));
  const TrainConfig c = load_train_config(
      {"--model.preset", "tiny-gpt2", "--lora.target_modules", "[c_attn]", "--lora.modules_to_save", "[wte, lm_head]"});
  ASSERT_TRUE(c.lora.has_value());
  EXPECT_EQ(c.lora->target_modules, (std::vector<std::string>{"c_attn"}));
  EXPECT_EQ(c.lora->modules_to_save, (std::vector<std::string>{"wte", "lm_head"}));
}

// HF's rule for the command line: its value wins over the run file's, whichever spelling
// of the setting each uses; two spellings in one place stay an error.
TEST(RunConfig, ACommandLineSpellingOverridesTheRunFilesOther) {
  TempDir dir;
  const std::string run = dir.write("r.yaml", "save_interval: 2\nnum_train_epochs: 2\nmodel: {preset: tiny-gpt2}\n");
  const TrainConfig c = load_train_config({run, "--save_steps", "3", "--epochs", "5"});
  EXPECT_EQ(c.save_interval, 3);
  EXPECT_EQ(c.origin.at("save_interval"), "command line");
  EXPECT_DOUBLE_EQ(c.epochs, 5.0);
  const TrainConfig same = load_train_config({run, "--save_interval", "4"});
  EXPECT_EQ(same.save_interval, 4);
  EXPECT_HAS(load_error({run, "--save_steps", "3", "--save_interval", "4"}), "same setting");
  EXPECT_HAS(load_error({dir.write("both.yaml", "save_steps: 1\nsave_interval: 2\n"), "--seed", "3"}), "same setting");
}

TEST(RunConfig, Errors) {
  TempDir dir;
  const auto err = [&](const std::string& yaml) { return load_error({dir.write("r.yaml", yaml)}); };
  EXPECT_HAS(err("learning_rte: 1e-4\n"), "did you mean 'learning_rate'");
  EXPECT_HAS(err("model: {preset: tiny-gpt2, pth: x}\n"), "did you mean 'path'");
  EXPECT_HAS(err("data: {trian: x}\n"), "did you mean 'train'");
  EXPECT_HAS(err("model: {preset: gpt3}\n"), "gpt3");
  EXPECT_HAS(err("lr_scheduler_type: cosin\n"), "did you mean 'cosine'");
  EXPECT_HAS(err("lr_scheduler_type: reduce_lr_on_plateau\n"), "not supported");
  EXPECT_HAS(err("per_device_eval_batch_size: -1\n"), "per_device_eval_batch_size");
  EXPECT_HAS(err("data_seed: -5\n"), "data_seed");
  EXPECT_HAS(err("device: gpu\n"), "auto, cpu, cuda");
  EXPECT_HAS(err("per_device_train_batch_size: 0\n"), "at least 1");
  EXPECT_HAS(err("num_train_epochs: 2\nepochs: 3\n"), "same setting");
  EXPECT_HAS(err("max_steps: 1.5\n"), "whole number");
  EXPECT_HAS(err("warmup_steps: 5\nwarmup_ratio: 0.1\n"), "keep one");
  EXPECT_HAS(err("- a\n- b\n"), "top level must be a mapping");
  EXPECT_HAS(err("deepspeed: missing.json\n"), "cannot open");
  // Messages name the file.
  EXPECT_HAS(err("seed: -1\n"), "r.yaml: seed");
}

TEST(RunConfig, ModelShorthandAndHiddenSizeForAuto) {
  TempDir dir;
  const std::string ds = dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})");
  const TrainConfig c = load_train_config({"--deepspeed", ds, "--model", "gpt2"});
  EXPECT_EQ(c.model.preset, "gpt2");
  EXPECT_EQ(c.zero.reduce_bucket_size, 768 * 768);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 7680);
  // An HF model directory: hidden size from its config.json.
  fs::create_directories(fs::path(ds).parent_path() / "m");
  dir.write("m/config.json", R"({"model_type": "gpt2", "n_embd": 96, "n_head": 4, "n_layer": 2, "vocab_size": 100,
                                "n_positions": 64})");
  const std::string mdir = (fs::path(ds).parent_path() / "m").string();
  const TrainConfig h = load_train_config({"--deepspeed", ds, "--model.path", mdir});
  EXPECT_EQ(h.model.path, mdir);
  EXPECT_EQ(h.zero.reduce_bucket_size, 96 * 96);
  // A config.json on its own (model.config: trained from scratch in that shape), also as
  // the `model: FILE.json` shorthand of a run file, relative to it.
  const std::string cfg_json = (fs::path(mdir) / "config.json").string();
  const TrainConfig k = load_train_config({"--deepspeed", ds, "--model.config", cfg_json});
  EXPECT_EQ(k.model.config_file, cfg_json);
  EXPECT_TRUE(k.model.preset.empty());
  EXPECT_EQ(k.zero.reduce_bucket_size, 96 * 96);
  const std::string run = dir.write("m/run.yaml", "model: config.json\n");
  EXPECT_EQ(load_train_config({run}).model.config_file, cfg_json);
}

TEST(RunConfig, OneModelSourceAtATime) {
  TempDir dir;
  const std::string cfg =
      dir.write("config.json", R"({"model_type": "gpt2", "n_embd": 64, "n_head": 2, "n_layer": 2})");
  const std::string run = dir.write("run.yaml", "model: {preset: gpt2, config: config.json}\n");
  EXPECT_HAS(load_error({run}), "give one of model.preset, model.path and model.config");
}

// Bounded inputs (issue 15): every config document is read by io::read_bounded_file, so a
// directory is an error (it was an empty config) and a device is never read to the end.
TEST(RunConfig, DirectoriesAndDevicesAreNotConfigs) {
  TempDir dir;
  const std::string d = dir.path().string();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{d}, {"--deepspeed", d}, {"--config_file", d}, {"--deepspeed_config_file", d}}) {
    const std::string e = load_error(args);
    EXPECT_HAS(e, d + ": is a directory");
  }
  EXPECT_HAS(load_error({"/dev/zero"}), "/dev/zero: not a regular file");
  EXPECT_HAS(load_error({"--deepspeed", "/dev/zero"}), "/dev/zero: not a regular file");
  EXPECT_HAS(load_error({"--config_file", "/dev/zero"}), "/dev/zero: not a regular file");
  // A file named inside a run config is read the same way.
  EXPECT_HAS(load_error({dir.write("r.yaml", "deepspeed: /dev/zero\n")}), "/dev/zero: not a regular file");
  std::ofstream(dir.file("big.json")) << std::string((16 << 20) + 1, ' ');
  EXPECT_HAS(load_error({"--deepspeed", dir.file("big.json")}), "more than the 16 MiB");
}

// Billion laughs: 9 levels of 9 aliases name 9^9 values in a few hundred bytes. The YAML
// to JSON conversion counts the values it makes and stops past its cap (it expanded to
// 7 GB and aborted before).
TEST(RunConfig, YamlAliasExpansionIsCapped) {
  TempDir dir;
  std::string yaml = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    yaml += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 9; ++i) yaml += std::string(i ? ", " : "") + "*" + static_cast<char>(c - 1);
    yaml += "]\n";
  }
  const std::string e = load_error({dir.write("lol.yaml", yaml)});
  EXPECT_HAS(e, "lol.yaml: the YAML expands to more than 1000000 values");
  // Aliases of reasonable size still work (DeepSpeed-style shared blocks).
  const TrainConfig c = load_train_config({dir.write("ok.yaml", "learning_rate: &v 0.25\nweight_decay: *v\n")});
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.25f);
}

// A string alias bomb: a 10 MB string named 100,000 times in a 10.8 MB file reached 6.9 GB
// with only 100,000 values. The expanded bytes are capped too; here a 4 KiB string named
// 10^4 times through four levels of lists (40 MiB, 11,111 values) is past the cap.
TEST(RunConfig, YamlStringAliasExpansionIsCappedInBytes) {
  TempDir dir;
  std::string yaml = "a: &a " + std::string(4096, 'x') + "\n";
  for (char c = 'b'; c <= 'e'; ++c) {
    yaml += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) yaml += std::string(i ? ", " : "") + "*" + static_cast<char>(c - 1);
    yaml += "]\n";
  }
  const std::string e = load_error({dir.write("bomb.yaml", yaml)});
  EXPECT_HAS(e, "bomb.yaml: the YAML's expanded size exceeds " + std::to_string(kMaxConfigExpandedBytes) + " bytes");
  // Keys count as well (an aliased key is copied into every mapping that uses it).
  std::string keys = "k: &k " + std::string(4096, 'y') + "\nm: &m {*k : 1}\n";
  for (char c = 'n'; c <= 'q'; ++c) {
    keys += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) keys += std::string(i ? ", " : "") + "*" + static_cast<char>(c - 1);
    keys += "]\n";
  }
  EXPECT_HAS(load_error({dir.write("keys.yaml", keys)}), "keys.yaml: the YAML's expanded size exceeds");
  // The same document one level smaller (4 MiB) reads, as a deliberately shared config may.
  std::string small = "a: &a " + std::string(4096, 'x') + "\n";
  for (char c = 'b'; c <= 'd'; ++c) {
    small += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) small += std::string(i ? ", " : "") + "*" + static_cast<char>(c - 1);
    small += "]\n";
  }
  const nlohmann::json doc = parse_document_text(small, "small.yaml", DocumentFormat::Yaml);
  EXPECT_EQ(doc["d"][9][9][9].get<std::string>().size(), 4096u);
}

// Plain scalars resolve without std::regex, whose recursion per character overflowed the
// stack on a scalar of a few megabytes (found by fuzz/config_fuzz.cpp); YAML 1.1's forms
// resolve as before.
TEST(RunConfig, LongYamlScalarsResolveWithoutRecursion) {
  const nlohmann::json doc = parse_yaml_text("a: " + std::string(4 << 20, '7') + "\nb: " + std::string(4 << 20, 'x') +
                                                 "\nc: 1_000\nd: -.5e+3\ne: 5e8\nf: +.\ng: 0.\nh: ._\ni: 012\nj: ~\n",
                                             "long.yaml");
  EXPECT_EQ(doc["a"].get<std::string>().size(), size_t{4} << 20);  // past 64 bits: the text
  EXPECT_EQ(doc["b"].get<std::string>().size(), size_t{4} << 20);
  EXPECT_EQ(doc["c"], 1000);
  EXPECT_EQ(doc["d"], -500.0);
  EXPECT_EQ(doc["e"], "5e8");
  EXPECT_EQ(doc["f"], "+.");
  EXPECT_EQ(doc["g"], 0.0);
  EXPECT_EQ(doc["h"], 0.0);
  EXPECT_EQ(doc["i"], "012");
  EXPECT_TRUE(doc["j"].is_null());
}

// A value that is not UTF-8 is refused where it is read: a reader that printed it later
// (nlohmann's dump) threw an uncaught type_error (found by fuzz/config_fuzz.cpp).
TEST(RunConfig, YamlThatIsNotUtf8IsRefused) {
  // A stray byte (Latin-1 é); lone surrogate escapes are yaml-cpp's own error.
  for (const auto& [text, what] : std::vector<std::pair<std::string, std::string>>{
           {"a: caf\xe9\n", "latin1.yaml: a key or value is not valid UTF-8 text"},
           {"caf\xe9: 1\n", "latin1.yaml: a key or value is not valid UTF-8 text"},
           {"\"k\\uD800\": 1\n", "latin1.yaml: not valid YAML"}}) {
    try {
      parse_document_text(text, "latin1.yaml", DocumentFormat::Yaml);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_HAS(e.what(), what);
    }
  }
  EXPECT_EQ(parse_document_text("a: \"caf\\u00e9 \\U0001F600\"\n", "ok.yaml", DocumentFormat::Yaml)["a"],
            "caf\xc3\xa9 \xf0\x9f\x98\x80");
  TempDir dir;
  const std::string acc = dir.write("acc.yaml",
                                    "compute_environment: LOCAL_MACHINE\ndeepspeed_config:\n  zero3_save_16bit_model: "
                                    "\x9a\n");
  EXPECT_HAS(load_error({"--config_file", acc}), "not valid UTF-8");
}

// Nesting is bounded in YAML and JSON alike (every reader of the tree recurses).
TEST(RunConfig, DeeplyNestedDocumentsAreRefused) {
  // 150 levels: past this reader's limit, within yaml-cpp's own (deeper is its error).
  const std::string deep = "{\"a\": " + std::string(150, '[') + std::string(150, ']') + "}";
  for (const auto format : {DocumentFormat::Json, DocumentFormat::Yaml}) {
    try {
      parse_document_text(deep, "deep.cfg", format);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_HAS(e.what(), "deep.cfg: ");
      EXPECT_HAS(e.what(), "nest deeper than 100 levels");
    }
  }
  const std::string ok = "{\"a\": " + std::string(50, '[') + std::string(50, ']') + "}";
  EXPECT_TRUE(parse_document_text(ok, "ok.json", DocumentFormat::Json)["a"].is_array());
}

// A key twice in one mapping of a JSON config is refused as the YAML reader refuses it
// (json.load and nlohmann keep the last, other readers the first: which one counts is
// never clear). HF files that Python reads keep Python's rule, the last one.
TEST(RunConfig, DuplicateKeysInJsonConfigsAreRefused) {
  TempDir dir;
  EXPECT_HAS(load_error({dir.write("run.json", R"({"learning_rate": 0.1, "seed": 3, "learning_rate": 0.2})")}),
             "run.json: key 'learning_rate' appears twice in one mapping; keep one");
  EXPECT_HAS(load_error({dir.write("run.yaml", "learning_rate: 0.1\nlearning_rate: 0.2\n")}),
             "run.yaml: key 'learning_rate' appears twice; keep one");
  EXPECT_EQ(load_train_config({dir.write("ok.json", R"({"learning_rate": 0.1, "seed": 3})")}).seed, 3u);
  const nlohmann::json hf = parse_document_text(R"({"hidden_size": 8, "hidden_size": 16})", "config.json",
                                                DocumentFormat::Json, DuplicateKeys::LastWins);
  EXPECT_EQ(hf["hidden_size"], 16);
  // A command-line value past a double is read on as text, and refused as a number.
  EXPECT_HAS(load_error({"--learning_rate", "1e400"}), "learning_rate");
  // A command-line JSON value follows the config rule.
  EXPECT_HAS(load_error({"--lora", R"({"r": 4, "r": 8})"}), "the command line: key 'r' appears twice");
}

}  // namespace
}  // namespace zt::config

namespace zt::config {
namespace {
// TrainingArguments keys with no effect here load, and each is named once (report_to: none
// says nothing, as it asks for nothing).
TEST(RunConfig, TrainingArgumentsWithoutEffectHereLoadWithAWarningEach) {
  TempDir dir;
  const std::string run = dir.write("run.yaml",
                                    "report_to: [wandb, comet_ml]\nlogging_dir: runs\ntf32: true\n"
                                    "dataloader_num_workers: 4\n");
  const TrainConfig c = load_train_config({run});
  for (const char* key : {"report_to", "logging_dir", "tf32", "dataloader_num_workers"}) {
    size_t n = 0;
    for (const std::string& w : c.warnings)
      n += w.find(std::string(key) + ": accepted but has no effect") != std::string::npos;
    EXPECT_EQ(n, 1u) << key;
  }
  const TrainConfig quiet = load_train_config({dir.write("quiet.yaml", "report_to: none\n")});
  for (const std::string& w : quiet.warnings) EXPECT_EQ(w.find("report_to"), std::string::npos) << w;
  EXPECT_HAS(load_error({dir.write("bad.yaml", "dataloader_num_workers: -1\n")}), "dataloader_num_workers");
}
}  // namespace
}  // namespace zt::config

namespace zt::config {
namespace {

// Issue 40: a relative path in a run file was taken from the current directory when it
// existed there, else beside the file: started where `../src` exists (a checkout folder
// named src), the built-in run read the wrong tree. One rule now, the same from every
// directory: relative to the file that writes it; `$PWD/` spells the current directory;
// a path given on the command line is taken from the current directory.
TEST(RunConfig, PathsInARunFileAreRelativeToTheFileFromAnyDirectory) {
  TempDir dir;
  const fs::path root = fs::weakly_canonical(dir.path());
  for (const char* d : {"checkout/conf", "checkout/src", "decoy/src", "decoy/deep"}) fs::create_directories(root / d);
  const std::string run = (root / "checkout/conf/run.yaml").string();
  std::ofstream(run) << "model: {tokenizer: ./tok.json}\n"
                        "data: {train: [../src, data.txt], validation: [$PWD/held_out.txt]}\n"
                        "deepspeed: ds.json\n";
  std::ofstream(root / "checkout/conf/ds.json") << R"({"zero_optimization": {"stage": 1}})";
  // Decoys that the old rule took wherever they existed from the current directory.
  std::ofstream(root / "decoy/deep/ds.json") << R"({"zero_optimization": {"stage": 2}})";
  std::ofstream(root / "decoy/deep/data.txt") << "decoy";
  const fs::path saved = fs::current_path();
  for (const fs::path& cwd : {root, root / "checkout", root / "checkout/conf", root / "decoy/deep"}) {
    SCOPED_TRACE(cwd.string());
    fs::current_path(cwd);
    // The run file named absolutely and relatively to where zerotrain starts.
    for (const std::string& named : {run, fs::relative(run, cwd).string()}) {
      const TrainConfig c = load_train_config({named, "--data.validation", "cli.txt"});
      const auto at = [](const std::string& p) { return fs::weakly_canonical(fs::absolute(p)); };
      ASSERT_EQ(c.data.train.size(), 2u);
      EXPECT_EQ(at(c.data.train[0]), root / "checkout/src");
      EXPECT_EQ(at(c.data.train[1]), root / "checkout/conf/data.txt");
      EXPECT_EQ(at(c.model.tokenizer), root / "checkout/conf/tok.json");
      EXPECT_EQ(c.zero.stage, 1);  // checkout/conf/ds.json, not the decoy
      // The command line's path stays relative to the current directory.
      EXPECT_EQ(c.data.validation, std::vector<std::string>{"cli.txt"});
      // $PWD/ in the file: the current directory.
      const TrainConfig p = load_train_config({named});
      ASSERT_EQ(p.data.validation.size(), 1u);
      EXPECT_EQ(at(p.data.validation[0]), cwd / "held_out.txt");
    }
  }
  // The built-in run (examples/default_run.yaml names ../src and ../docs), started where
  // `../src` is another tree: the repository's own folders.
  fs::current_path(root / "decoy/deep");
  const std::string builtin = std::string(ZT_SOURCE_DIR) + "/examples/default_run.yaml";
  const TrainConfig b = load_train_config({builtin});
  const fs::path source = fs::weakly_canonical(ZT_SOURCE_DIR);
  ASSERT_FALSE(b.data.train.empty());
  for (const std::string& p : b.data.train)
    EXPECT_EQ(fs::weakly_canonical(fs::absolute(p)).string().rfind(source.string() + "/", 0), 0u) << p;
  fs::current_path(saved);
}

// Issue 40: a command line naming a model or data is a run of its own (HF's defaults, not
// the built-in demo's); `--model_name_or_path` (HF's name) replaces a file's model choice
// instead of clashing with it.
TEST(RunConfig, ACommandLineModelIsARunOfItsOwnAndReplacesTheFilesModel) {
  EXPECT_TRUE(command_line_names_model_or_data({"--model_name_or_path", "m"}));
  EXPECT_TRUE(command_line_names_model_or_data({"--model.name_or_path=m"}));
  EXPECT_TRUE(command_line_names_model_or_data({"--model", "tiny-llama"}));
  EXPECT_TRUE(command_line_names_model_or_data({"--data.train", "x.txt", "--max_steps", "3"}));
  EXPECT_FALSE(command_line_names_model_or_data({"--max_steps", "50", "--learning_rate", "1e-3"}));
  EXPECT_FALSE(command_line_names_model_or_data({"--seq_len", "64", "--deepspeed", "ds.json"}));
  EXPECT_FALSE(command_line_names_model_or_data({"--model.tokenizer", "tok.json"}));

  TempDir dir;
  const std::string run = dir.write("run.yaml", "model: tiny-gpt2\nlearning_rate: 1e-3\n");
  const TrainConfig c = load_train_config({run, "--model_name_or_path", "/models/m"});
  EXPECT_EQ(c.model.path, "/models/m");
  EXPECT_TRUE(c.model.preset.empty());
  const std::string sect = dir.write("sect.yaml", "model: {preset: tiny-gpt2, tokenizer: tok.json}\n");
  const TrainConfig d = load_train_config({sect, "--model.path", "/models/m"});
  EXPECT_EQ(d.model.path, "/models/m");
  EXPECT_TRUE(d.model.preset.empty());
  EXPECT_EQ(d.model.tokenizer, dir.file("tok.json"));  // the rest of the file's section stays
}

// The Accelerate YAML's deepspeed_config_file follows the same rule.
TEST(RunConfig, AnAccelerateYamlsDeepSpeedFileIsRelativeToTheYaml) {
  TempDir dir;
  const fs::path root = fs::weakly_canonical(dir.path());
  fs::create_directories(root / "conf");
  fs::create_directories(root / "elsewhere");
  std::ofstream(root / "conf/ds.json") << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}})";
  std::ofstream(root / "elsewhere/ds.json")
      << R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})";
  const std::string yaml = (root / "conf/acc.yaml").string();
  std::ofstream(yaml) << "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n";
  const fs::path saved = fs::current_path();
  fs::current_path(root / "elsewhere");
  EXPECT_EQ(load_train_config({"--config_file", yaml}).zero.stage, 1);
  // Written as Accelerate reads it (from the launch directory): the error spells the fix.
  const std::string cwd_yaml = (root / "conf/cwd.yaml").string();
  std::ofstream(cwd_yaml) << "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: conf/ds.json\n";
  fs::current_path(root);
  const std::string e = load_error({"--config_file", cwd_yaml});
  EXPECT_HAS(e, "taken from the YAML's folder");
  EXPECT_HAS(e, "write $PWD/conf/ds.json");
  fs::current_path(saved);
}

// Issue 40: the end-of-run samples' settings were first checked after training (a
// temperature of 1e300 became inf in float, refused only then); they, and the sizes the
// batch arithmetic multiplies, are checked when the config loads.
TEST(RunConfig, SampleSettingsAndBatchSizesAreCheckedAtStartUp) {
  EXPECT_HAS(load_error({"--samples.tokens", "9223372036854775807"}), "samples.tokens");
  EXPECT_HAS(load_error({"--samples.top_k", "4294967296"}), "samples.top_k");
  EXPECT_HAS(load_error({"--samples.temperature", "1e300"}), "samples.temperature");
  EXPECT_HAS(load_error({"--per_device_train_batch_size", "1099511627776"}), "per_device_train_batch_size");
  EXPECT_HAS(load_error({"--gradient_accumulation_steps", "1099511627776"}), "gradient_accumulation_steps");
  EXPECT_HAS(load_error({"--data.seq_len", "1099511627776"}), "data.seq_len");
  EXPECT_HAS(load_error({"--adam_beta1", "1"}), "adam_beta1: 1 is not in [0, 1)");
  EXPECT_HAS(load_error({"--adam_beta2", "-0.5"}), "adam_beta2");
  EXPECT_HAS(load_error({"--learning_rate", "-1e-3"}), "learning_rate: must not be negative");
  EXPECT_HAS(load_error({"--lora.r", "9223372036854775807", "--lora.target_modules", "q_proj"}),
             "r 9223372036854775807");
  const TrainConfig ok =
      load_train_config({"--samples.tokens", "200", "--samples.top_k", "40", "--samples.temperature", "0.8"});
  EXPECT_EQ(ok.sample_tokens, 200);
}

}  // namespace
}  // namespace zt::config
