// ds_config.json: seed configs as users write them, the batch-size rule, "auto"
// resolution, and every kind of refusal (message names file, key and fix; exit code 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "config/ds_config.h"
#include "config/run_config.h"

namespace zt::config {
namespace {

using nlohmann::json;

const std::string kSeeds = std::string(ZT_SOURCE_DIR) + "/tests/data/seed-configs/";

TrainConfig resolve(const json& doc, const RunContext& run = {}) {
  TrainConfig cfg;
  resolve_ds_config(parse_ds_config(doc, "ds.json"), run, cfg);
  return cfg;
}

// The error's message, checking it is a user error (exit code 2) that names the file.
std::string error_of(const json& doc, const RunContext& run = {}) {
  try {
    resolve(doc, run);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find("ds.json"), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << doc.dump();
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(DsConfig, SeedZero3OffloadFp16) {
  const TrainConfig c = load_train_config({"--deepspeed", kSeeds + "ds_config_zero3_offload_fp16.json"});
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::CPU);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::None);
  EXPECT_EQ(c.zero.overlap_comm, zero::OverlapComm::On);  // stage 3 default
  EXPECT_EQ(c.precision, Precision::F16);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.loss_scale, 0.0f);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.optimizer.type, zero::OptimizerType::AdamW);
  EXPECT_FLOAT_EQ(c.optimizer.lr, 5e-5f);
  // No batch keys at all: filled from the run (HF default per-device batch 8).
  EXPECT_EQ(c.micro_batch_per_gpu, 8);
  EXPECT_EQ(c.grad_accum_steps, 1);
  EXPECT_EQ(c.train_batch_size, 8);
}

TEST(DsConfig, SeedLargeBatchDerivesMicroFromWorld) {
  const std::string f = kSeeds + "ds_config_zero3_large_batch.json";
  LoadOptions eight;
  eight.world_size = 8;
  const TrainConfig c = load_train_config({"--deepspeed", f}, eight);
  EXPECT_EQ(c.train_batch_size, 4096);
  EXPECT_EQ(c.grad_accum_steps, 8);
  EXPECT_EQ(c.micro_batch_per_gpu, 64);                // 4096 / (8 * 8)
  EXPECT_EQ(c.zero.allgather_bucket_size, 500000000);  // written 5e8
  EXPECT_EQ(c.zero.overlap_comm, zero::OverlapComm::On);
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.01f);
  LoadOptions three;
  three.world_size = 3;  // 4096 is not divisible by 8 * 3
  try {
    load_train_config({"--deepspeed", f}, three);
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "not divisible");
    EXPECT_HAS(e.what(), "ds_config_zero3_large_batch.json");
  }
}

TEST(DsConfig, SeedDebugNvmeActivationCheckpointing) {
  const TrainConfig d = load_train_config({"--deepspeed", kSeeds + "ds_config_debug.json"});
  EXPECT_EQ(d.zero.stage, 3);
  EXPECT_EQ(d.steps_per_print, 1);
  EXPECT_EQ(d.train_batch_size, 1);

  // NVMe offload is accepted as config (the engine implements it); paths and aio kept.
  const TrainConfig n = load_train_config({"--deepspeed", kSeeds + "ds_config_nvme.json"});
  EXPECT_EQ(n.zero.offload_param.device, OffloadDevice::NVMe);
  EXPECT_EQ(n.zero.offload_optimizer.device, OffloadDevice::NVMe);
  EXPECT_EQ(n.zero.offload_param.nvme_path, "/tmp/zerotrain_nvme");
  EXPECT_EQ(n.precision, Precision::BF16);
  EXPECT_EQ(n.aio.block_size, 1048576);
  EXPECT_EQ(n.aio.queue_depth, 8);
  EXPECT_TRUE(n.aio.overlap_events);
  EXPECT_EQ(n.train_batch_size, 8);

  const TrainConfig a = load_train_config({"--deepspeed", kSeeds + "ds_config_activation_checkpointing.json"});
  EXPECT_TRUE(a.model.activation_checkpointing);
  EXPECT_TRUE(a.activation_checkpointing.partition_activations);
  EXPECT_TRUE(a.activation_checkpointing.contiguous_memory_optimization);
  EXPECT_EQ(a.zero.stage, 2);
  EXPECT_EQ(a.fp16.initial_scale_power, 16);
  EXPECT_EQ(a.micro_batch_per_gpu, 2);
  EXPECT_EQ(a.grad_accum_steps, 1);
}

struct BatchCase {
  int64_t b, m, g;
  int world;
  int64_t want_b, want_m, want_g;  // want_b == 0: an error
};

TEST(DsConfig, BatchDerivationTable) {
  const BatchCase cases[] = {
      {32, 4, 2, 4, 32, 4, 2},  // all three: consistent
      {32, 4, 0, 4, 32, 4, 2},  // batch + micro -> gas
      {32, 0, 2, 4, 32, 4, 2},  // batch + gas -> micro
      {0, 4, 2, 4, 32, 4, 2},   // micro + gas -> batch
      {32, 0, 0, 4, 32, 8, 1},  // batch only -> gas 1
      {0, 4, 0, 4, 16, 4, 1},   // micro only -> gas 1
      {16, 4, 1, 1, 0, 0, 0},   // inconsistent
      {30, 4, 0, 4, 0, 0, 0},   // not divisible
      {0, 0, 2, 4, 0, 0, 0},    // gas only
      {0, 0, 0, 4, 0, 0, 0},    // none
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << c.b << " " << c.m << " " << c.g << " world " << c.world);
    if (c.want_g == 0) {
      EXPECT_THROW(derive_batch_sizes(c.b, c.m, c.g, c.world, "ds.json"), Error);
      continue;
    }
    const BatchSizes r = derive_batch_sizes(c.b, c.m, c.g, c.world, "ds.json");
    EXPECT_EQ(r.train_batch_size, c.want_b);
    EXPECT_EQ(r.micro_batch, c.want_m);
    EXPECT_EQ(r.grad_accum, c.want_g);
  }
  try {
    derive_batch_sizes(16, 4, 1, 1, "ds.json");
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "inconsistent");
    EXPECT_HAS(e.what(), "16 != train_micro_batch_size_per_gpu 4");
  }
}

TEST(DsConfig, AutoResolvesFromTheRun) {
  RunContext run;
  run.world_size = 2;
  run.micro_batch = Setting<int64_t>(Given::Set, 3);
  run.grad_accum = Setting<int64_t>(Given::Set, 5);
  run.lr = Setting<double>(Given::Set, 2e-4);
  run.weight_decay = Setting<double>(Given::Set, 0.1);
  run.beta2 = Setting<double>(Given::Set, 0.95);
  run.max_grad_norm = Setting<double>(Given::Set, 0.5);
  run.precision = Setting<Precision>(Given::Set, Precision::BF16);
  run.warmup_steps = 7;
  run.total_steps = 100;
  run.hidden_size = 64;
  const json doc = json::parse(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"}})");
  const TrainConfig c = resolve(doc, run);
  EXPECT_EQ(c.micro_batch_per_gpu, 3);
  EXPECT_EQ(c.grad_accum_steps, 5);
  EXPECT_EQ(c.train_batch_size, 30);
  EXPECT_FLOAT_EQ(c.gradient_clipping, 0.5f);
  EXPECT_EQ(c.precision, Precision::BF16);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_FLOAT_EQ(c.optimizer.lr, 2e-4f);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.95f);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.1f);
  EXPECT_EQ(c.scheduler["type"], "WarmupDecayLR");
  EXPECT_DOUBLE_EQ(c.scheduler["params"]["warmup_min_lr"].get<double>(), 0.0);
  EXPECT_NEAR(c.scheduler["params"]["warmup_max_lr"].get<double>(), 2e-4, 1e-9);
  EXPECT_EQ(c.scheduler["params"]["warmup_num_steps"].get<int64_t>(), 7);
  EXPECT_EQ(c.scheduler["params"]["total_num_steps"].get<int64_t>(), 100);
  EXPECT_EQ(c.zero.reduce_bucket_size, 64 * 64);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, static_cast<int64_t>(0.9 * 64 * 64));
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 640);
  EXPECT_EQ(c.origin.at("train_micro_batch_size_per_gpu"), "auto (per_device_train_batch_size)");

  run.hidden_size = 0;  // a size "auto" with no model is an error naming the key
  EXPECT_HAS(error_of(doc, run), "zero_optimization.reduce_bucket_size");
  EXPECT_HAS(error_of(json{{"train_micro_batch_size_per_gpu", 1}, {"aio", {{"block_size", "auto"}}}}),
             "aio.block_size: \"auto\" is not resolvable");
}

TEST(DsConfig, ExplicitValuesMustMatchTheRun) {
  RunContext run;
  run.micro_batch = Setting<int64_t>(Given::Set, 8);
  EXPECT_HAS(error_of(json{{"train_micro_batch_size_per_gpu", 4}}, run), "per_device_train_batch_size to 8");
  run = RunContext{};
  run.lr = Setting<double>(Given::Set, 1e-4);
  EXPECT_HAS(error_of(json::parse(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "adam", "params": {"lr": 3e-4}}})"),
                      run),
             "optimizer.params.lr");
  run = RunContext{};
  run.precision = Setting<Precision>(Given::Set, Precision::BF16);
  EXPECT_HAS(error_of(json::parse(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true}})"), run),
             "fp16.enabled");
}

TEST(DsConfig, PrecisionBlocks) {
  const json both =
      json::parse(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  EXPECT_HAS(error_of(both), "both true");
  const TrainConfig alias =
      resolve(json::parse(R"({"train_micro_batch_size_per_gpu": 1, "bfloat16": {"enabled": true}})"));
  EXPECT_EQ(alias.precision, Precision::BF16);
  EXPECT_HAS(error_of(json::parse(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})")), "alias");
  EXPECT_HAS(error_of(json::parse(R"({"fp16": {"enabled": true, "loss_scale_windw": 10}})")),
             "did you mean 'loss_scale_window'");
  const TrainConfig fp16 = resolve(json::parse(R"({"train_micro_batch_size_per_gpu": 1,
      "fp16": {"enabled": true, "loss_scale": 128, "hysteresis": 4, "min_loss_scale": 0.5, "consecutive_hysteresis": true}})"));
  EXPECT_EQ(fp16.fp16.loss_scale, 128.0f);
  EXPECT_EQ(fp16.fp16.hysteresis, 4);
  EXPECT_TRUE(fp16.fp16.consecutive_hysteresis);
  EXPECT_FLOAT_EQ(fp16.fp16.min_loss_scale, 0.5f);
}

TEST(DsConfig, Optimizers) {
  const auto opt = [](const std::string& block) {
    return resolve(json::parse(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": )" + block + "}")).optimizer;
  };
  const auto a = opt(R"({"type": "adam", "params": {"lr": 1e-3, "betas": [0.8, 0.9], "adam_w_mode": false}})");
  EXPECT_EQ(a.type, zero::OptimizerType::Adam);
  EXPECT_FALSE(a.adam_w_mode);
  EXPECT_FLOAT_EQ(a.beta1, 0.8f);
  const auto s = opt(R"({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}})");
  EXPECT_EQ(s.type, zero::OptimizerType::SGD);
  EXPECT_TRUE(s.nesterov);
  EXPECT_FLOAT_EQ(s.momentum, 0.9f);
  const auto l = opt(R"({"type": "LION", "params": {"lr": 1e-4}})");
  EXPECT_EQ(l.type, zero::OptimizerType::Lion);
  EXPECT_FLOAT_EQ(l.beta2, 0.99f);  // Lion's own default
  for (const char* name : {"Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Adagrad"}) {
    try {
      opt(std::string(R"({"type": ")") + name + R"("})");
      ADD_FAILURE() << name;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
      EXPECT_HAS(e.what(), "optimizer.type");
      EXPECT_HAS(e.what(), name);
    }
  }
  EXPECT_HAS(error_of(json::parse(R"({"optimizer": {"type": "AdamWW"}})")), "did you mean 'AdamW'");
  EXPECT_HAS(error_of(json::parse(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})")),
             "optimizer.params.betas");
  EXPECT_HAS(error_of(json::parse(R"({"optimizer": {"type": "SGD", "params": {"betas": [0.9, 0.9]}}})")),
             "unknown key 'betas'");
}

TEST(DsConfig, Schedulers) {
  const auto sched = [](const std::string& block) {
    return parse_ds_config(json::parse(R"({"scheduler": )" + block + "}"), "ds.json").scheduler;
  };
  const json w = sched(R"({"type": "warmuplr", "params": {"warmup_num_steps": "1e3", "warmup_type": "linear"}})");
  EXPECT_EQ(w["type"], "WarmupLR");  // canonical spelling
  EXPECT_TRUE(w["params"]["warmup_num_steps"].is_number_integer());
  EXPECT_EQ(w["params"]["warmup_num_steps"].get<int64_t>(), 1000);
  const std::pair<const char*, const char*> each[] = {
      {"WarmupDecayLR", R"({"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "total_num_steps": 100})"},
      {"WarmupCosineLR", R"({"total_num_steps": 100, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01})"},
      {"OneCycle",
       R"({"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 10, "cycle_momentum": false})"},
      {"LRRangeTest",
       R"({"lr_range_test_min_lr": 1e-5, "lr_range_test_step_rate": 1.0, "lr_range_test_staircase": "yes"})"}};
  for (const auto& [type, params] : each) {
    const json s = sched(std::string(R"({"type": ")") + type + R"(", "params": )" + params + "}");
    EXPECT_EQ(s["type"], type);
  }
  // A rate stays a float; a YAML-style boolean string becomes a boolean.
  const json r =
      sched(R"({"type": "LRRangeTest", "params": {"lr_range_test_step_rate": 1.0, "lr_range_test_staircase": "yes"}})");
  EXPECT_TRUE(r["params"]["lr_range_test_step_rate"].is_number_float());
  EXPECT_EQ(r["params"]["lr_range_test_staircase"], true);
  EXPECT_THROW(sched(R"({"type": "OneCycle", "params": {"cycle_min_lr": 1e-4}})"), Error);  // cycle_max_lr required
  EXPECT_THROW(sched(R"({"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": "auto"}})"), Error);
  try {
    sched(R"({"type": "WarmupLR", "params": {"warmup_max_lrr": 1e-3}})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "scheduler.params.warmup_max_lrr");
    EXPECT_HAS(e.what(), "did you mean 'warmup_max_lr'");
  }
  EXPECT_THROW(sched(R"({"type": "WarmupDecayLR", "params": {}})"), Error);  // total_num_steps required
  EXPECT_THROW(sched(R"({"type": "Cosine"})"), Error);
  EXPECT_THROW(sched(R"({"type": "WarmupLR", "params": {"warmup_type": "exp"}})"), Error);
  // Ranges and refusals from the params table, at load time, naming the key.
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "WarmupCosineLR",
             "params": {"total_num_steps": 10, "warmup_min_ratio": 2}}})")),
             "scheduler.params.warmup_min_ratio: must be in [0, 1]");
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": -1}}})")),
             "scheduler.params.warmup_num_steps: must be >= 0");
  // Issue 40: WarmupCosineLR over 0 steps divided by zero; a momentum of 1 or more, a
  // negative lr decay rate or a falling range test leave the optimizer's range.
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 0}}})")),
             "scheduler.params.total_num_steps: must be a positive number of steps");
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01,
             "cycle_max_lr": 0.1, "cycle_max_mom": 1.2}}})")),
             "scheduler.params.cycle_max_mom: must be in [0, 1)");
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01,
             "cycle_max_lr": 0.1, "cycle_min_mom": 1}}})")),
             "scheduler.params.cycle_min_mom: must be in [0, 1)");
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01,
             "cycle_max_lr": 0.1, "decay_lr_rate": -0.5}}})")),
             "scheduler.params.decay_lr_rate: must be >= 0");
  EXPECT_HAS(
      error_of(json::parse(R"({"scheduler": {"type": "LRRangeTest", "params": {"lr_range_test_step_rate": -1}}})")),
      "scheduler.params.lr_range_test_step_rate: must be >= 0");
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": -0.1}}})")),
             "scheduler.params.warmup_max_lr: must be >= 0");
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 3}}})")),
             "scheduler.params.last_batch_iteration: not supported");
  EXPECT_HAS(error_of(json::parse(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"cos_min_ratio": 0.1}}})")),
             "unknown key 'cos_min_ratio'");
}

TEST(DsConfig, ZeroSection) {
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stag": 2}})")), "did you mean 'stage'");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": 4}})")), "0, 1, 2 or 3");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": "three"}})")), "expected a number");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})")),
             "needs ZeRO stage 3");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})")),
             "nvme_path");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "gpu"}}})")),
             "not one of none, cpu, nvme");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"devise": "cpu"}}})")),
             "did you mean 'device'");
  // Deprecated spellings and aliases map onto the current keys.
  const TrainConfig old = resolve(json::parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
      "stage": 3, "cpu_offload": true, "cpu_offload_params": true, "cpu_offload_use_pin_memory": false,
      "stage3_gather_fp16_weights_on_model_save": true, "prefetch_bucket_size": 1000, "max_live_parameters": 7}})"));
  EXPECT_EQ(old.zero.offload_optimizer.device, OffloadDevice::CPU);
  EXPECT_EQ(old.zero.offload_param.device, OffloadDevice::CPU);
  EXPECT_FALSE(old.zero.offload_optimizer.pin_memory);
  EXPECT_TRUE(old.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(old.zero.stage3_prefetch_bucket_size, 1000);
  EXPECT_EQ(old.zero.stage3_max_live_parameters, 7);
  EXPECT_HAS(
      error_of(json::parse(R"({"zero_optimization": {"prefetch_bucket_size": 1, "stage3_prefetch_bucket_size": 2}})")),
      "keep 'stage3_prefetch_bucket_size'");
  // ZeRO++: refused when switched on, accepted at its defaults.
  for (const char* on : {R"("zero_quantized_weights": true)", R"("zero_hpz_partition_size": 8)",
                         R"("zero_quantized_gradients": true)", R"("mics_shard_size": 4)"}) {
    try {
      resolve(json::parse(std::string(R"({"zero_optimization": {"stage": 3, )") + on + "}}"));
      ADD_FAILURE() << on;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
      EXPECT_HAS(e.what(), "zero_optimization.");
    }
  }
  EXPECT_NO_THROW(resolve(json::parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization":
      {"stage": 3, "zero_quantized_weights": false, "zero_hpz_partition_size": 1}})")));
}

TEST(DsConfig, TopLevelKeys) {
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimisation": {"stage": 2}})")), "did you mean 'zero_optimization'");
  EXPECT_HAS(error_of(json::parse(R"({"train_batch_size": 0})")), "positive");
  EXPECT_HAS(error_of(json::parse(R"({"gradient_accumulation_steps": 4})")), "underdetermined");
  EXPECT_HAS(error_of(json::parse(R"({"amp": {"enabled": true}})")), "amp");
  EXPECT_HAS(error_of(json::parse(R"({"aio": {"thread_count": 2, "intra_op_parallelism": 2}})")), "thread_count");
  EXPECT_HAS(error_of(json::parse(R"({"communication_data_type": "fp64"})")), "fp16, bf16, fp32");
  const TrainConfig c = resolve(json::parse(R"({"train_batch_size": 8, "gradient_clipping": 0, "steps_per_print": 5,
      "wall_clock_breakdown": true, "prescale_gradients": true, "gradient_predivide_factor": 2.0,
      "communication_data_type": "bf16", "data_types": {"grad_accum_dtype": "fp32"},
      "checkpoint": {"tag_validation": "Fail"}, "aio": {"thread_count": 4}, "tensorboard": {"enabled": true}})"));
  EXPECT_EQ(c.gradient_clipping, 0.0f);
  EXPECT_EQ(c.steps_per_print, 5);
  EXPECT_TRUE(c.wall_clock_breakdown);
  EXPECT_DOUBLE_EQ(c.gradient_predivide_factor, 2.0);
  EXPECT_EQ(c.communication_data_type, "bf16");
  EXPECT_EQ(c.grad_accum_dtype, "fp32");
  EXPECT_EQ(c.aio.intra_op_parallelism, 4);
  // tensorboard: DeepSpeed's monitor (output_path "" / job_name "DeepSpeedJobName"), its tags.
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.tensorboard_dir, "DeepSpeedJobName");
  EXPECT_EQ(c.tensorboard_tags, TrainConfig::TensorBoardTags::DeepSpeed);
  const TrainConfig named = resolve(json::parse(R"({"train_batch_size": 8,
      "tensorboard": {"enabled": true, "output_path": "logs", "job_name": "run1"}, "wandb": {"enabled": true}})"));
  EXPECT_EQ(named.tensorboard_dir, "logs/run1");
  ASSERT_EQ(named.warnings.size(), 1u);  // wandb: accepted, no effect
  EXPECT_HAS(named.warnings[0], "wandb");
  EXPECT_TRUE(named.csv_monitor_dir.empty());
  // csv_monitor: DeepSpeed's csvMonitor folder, the same defaults; no warning.
  const TrainConfig csv = resolve(json::parse(R"({"train_batch_size": 8, "csv_monitor": {"enabled": true}})"));
  EXPECT_EQ(csv.csv_monitor_dir, "DeepSpeedJobName");
  EXPECT_TRUE(csv.warnings.empty());
  EXPECT_EQ(resolve(json::parse(R"({"train_batch_size": 8, "csv_monitor": {"enabled": true, "output_path": "out",
      "job_name": "j"}})"))
                .csv_monitor_dir,
            "out/j");
  EXPECT_TRUE(
      resolve(json::parse(R"({"train_batch_size": 8, "csv_monitor": {"enabled": false}})")).csv_monitor_dir.empty());
  EXPECT_HAS(error_of(json::parse(R"({"csv_monitor": {"enabled": true, "outputpath": "x"}})")), "outputpath");
}

// Issue 40: every whole number a ds_config gives is range-checked before it reaches an int
// field or any arithmetic: aio sizes (queue_depth x intra_op_parallelism was an int
// product), the offload dicts' buffer_count, the batch sizes (micro x accumulation x world
// was an unchecked product).
TEST(DsConfig, SizesThatWouldOverflowAreRefusedNamingTheKey) {
  EXPECT_HAS(error_of(json::parse(R"({"aio": {"queue_depth": 4294967297}})")),
             "aio.queue_depth: 4294967297 is too large; it must be at most 65536");
  EXPECT_HAS(error_of(json::parse(R"({"aio": {"intra_op_parallelism": 100000}})")),
             "aio.intra_op_parallelism: 100000 is too large; it must be at most 1024");
  EXPECT_HAS(error_of(json::parse(R"({"aio": {"block_size": 1e15}})")), "aio.block_size");
  EXPECT_HAS(error_of(json::parse(R"({"aio": {"queue_depth": 0}})")), "aio.queue_depth: must be positive");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
             "buffer_count": 4294967296}}})")),
             "offload_param.buffer_count: 4294967296 is too large");
  EXPECT_HAS(error_of(json::parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
             "buffer_count": -1}}})")),
             "buffer_count and buffer_size must be positive");
  EXPECT_HAS(error_of(json::parse(R"({"train_micro_batch_size_per_gpu": 1e12})")),
             "train_micro_batch_size_per_gpu: 1000000000000 is too large");
  RunContext big;
  big.world_size = 1 << 20;
  EXPECT_HAS(error_of(json::parse(R"({"train_micro_batch_size_per_gpu": 16777216,
             "gradient_accumulation_steps": 16777216})"),
                      big),
             "does not fit in a 64-bit integer");
  // An int field's own range holds even where the row has no bound of its own.
  EXPECT_HAS(error_of(json::parse(R"({"activation_checkpointing": {"number_checkpoints": 1e300}})")),
             "activation_checkpointing.number_checkpoints");
}

// A key twice in one mapping of a ds_config.json is exit 2 naming the key and the file, as
// the YAML reader refuses it (DeepSpeed's json.load would silently keep the last one).
TEST(DsConfig, DuplicateKeysAreRefused) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("zt_ds_dup_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(root);
  struct Dir {
    fs::path root;
    std::string write(const std::string& name, const std::string& text) const {
      std::ofstream(root / name) << text;
      return (root / name).string();
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(root, ec);
    }
  } dir{root};
  auto load_error = [](const std::string& path) {
    try {
      load_ds_config(path);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  const std::string top = dir.write("top.json", R"({"train_batch_size": 8, "train_batch_size": 16})");
  EXPECT_HAS(load_error(top), top + ": key 'train_batch_size' appears twice in one mapping; keep one");
  const std::string nested =
      dir.write("nested.json", R"({"zero_optimization": {"stage": 2, "overlap_comm": true, "stage": 3}})");
  EXPECT_HAS(load_error(nested), nested + ": key 'stage' appears twice");
  // A number past a double is a JSON error naming the file, not an uncaught exception
  // (found by fuzz/config_fuzz.cpp).
  const std::string huge = dir.write("huge.json", R"({"gradient_clipping": 15e7000})");
  EXPECT_HAS(load_error(huge), huge + ": not valid JSON");
  // The same key in two mappings is no repetition.
  const DsConfig c = load_ds_config(
      dir.write("ok.json", R"({"fp16": {"enabled": false}, "bf16": {"enabled": true}, "train_batch_size": 8})"));
  EXPECT_EQ(c.train_batch_size().value, 8);
}

}  // namespace
}  // namespace zt::config
