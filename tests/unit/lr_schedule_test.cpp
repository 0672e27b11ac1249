// LR schedules against values worked out by hand from DeepSpeed's lr_schedules.py and HF's
// get_*_schedule_with_warmup (the arithmetic is in the comments). Step k is the k-th
// update (0-based); DeepSpeed evaluates its schedule at last_batch_iteration = k - 1.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "config/scheduler_keys.h"
#include "core/error.h"
#include "train/lr_schedule.h"

using namespace zt;
using namespace zt::train;
using nlohmann::json;

namespace {

std::unique_ptr<LrSchedule> ds(const std::string& text, float base_lr = 0.1f, ScheduleRun run = {}) {
  return make_deepspeed_schedule(json::parse(text), base_lr, "ds_config.json", run);
}

void expect_lr(const LrSchedule& s, int64_t step, double expected) {
  EXPECT_NEAR(s.lr(step), expected, 1e-7 + 1e-6 * std::fabs(expected)) << s.describe() << " at step " << step;
}

// BadInput whose message contains `needle`.
void expect_error(const std::string& text, const std::string& needle, ScheduleRun run = {}) {
  try {
    ds(text, 0.1f, run);
    FAIL() << "expected an error for " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(DeepSpeedSchedule, WarmupLrLog) {
  auto s = ds(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.01,
                 "warmup_num_steps": 10}})");
  expect_lr(*s, 0, 0.0);                                    // constructor: min
  expect_lr(*s, 1, 0.0);                                    // it 0: log(1) = 0
  expect_lr(*s, 2, 0.01 * std::log(2.0) / std::log(10.0));  // it 1: 0.0030103
  expect_lr(*s, 5, 0.0069897000433601885);                  // log(5)/log(10)
  expect_lr(*s, 10, 0.01);                                  // it 9: log(10)/log(10)
  expect_lr(*s, 11, 0.01);
  expect_lr(*s, 100000, 0.01);
}

TEST(DeepSpeedSchedule, WarmupLrLinearAndMaxDefaultsToOptimizerLr) {
  auto s = ds(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_num_steps": 10,
                 "warmup_type": "linear"}})",
              0.011f);
  expect_lr(*s, 0, 0.001);
  expect_lr(*s, 1, 0.001);   // it 0: 0/10
  expect_lr(*s, 6, 0.006);   // it 5: 0.001 + 0.010 * 0.5
  expect_lr(*s, 10, 0.01);   // it 9
  expect_lr(*s, 11, 0.011);  // it 10: warmup over
  // warmup_num_steps 1 is raised to 2 as DeepSpeed does: it 1 = log(2)/log(2) = 1.
  auto one = ds(R"({"type": "WarmupLR", "params": {"warmup_num_steps": 1}})", 0.5f);
  expect_lr(*one, 1, 0.0);
  expect_lr(*one, 2, 0.5);
  // No params at all: min 0, max = lr, 1000 log steps.
  auto dflt = ds(R"({"type": "WarmupLR"})", 0.5f);
  expect_lr(*dflt, 2, 0.5 * std::log(2.0) / std::log(1000.0));
}

TEST(DeepSpeedSchedule, WarmupDecayLr) {
  auto s = ds(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": 20, "warmup_max_lr": 0.01,
                 "warmup_num_steps": 10, "warmup_type": "linear"}})");
  expect_lr(*s, 1, 0.0);
  expect_lr(*s, 6, 0.005);   // it 5: 5/10
  expect_lr(*s, 11, 0.01);   // it 10: (20 - 10) / (20 - 10)
  expect_lr(*s, 16, 0.005);  // it 15: 5/10
  expect_lr(*s, 21, 0.0);    // it 20
  expect_lr(*s, 30, 0.0);    // clamped at 0
  // DeepSpeed's WarmupDecayLR signature defaults warmup_max_lr to 0.001 (not the lr).
  auto d = ds(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": 20, "warmup_num_steps": 10}})", 0.5f);
  expect_lr(*d, 11, 0.001);
}

TEST(DeepSpeedSchedule, WarmupCosineLr) {
  auto s = ds(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 20, "warmup_num_steps": 10,
                 "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_type": "linear"}})",
              0.1f);
  expect_lr(*s, 0, 0.0);    // constructor: ratio 0
  expect_lr(*s, 1, 0.01);   // it 0: ratio 0.1
  expect_lr(*s, 6, 0.055);  // it 5: 0.1 + 0.5 * 0.9
  // it 10: progress 1/10; (1 + cos(0.1 pi)) / 2 = 0.9755283; 0.01 + 0.99 * that = 0.9757730
  expect_lr(*s, 11, 0.1 * (0.01 + 0.99 * (1 + std::cos(M_PI * 0.1)) / 2));
  expect_lr(*s, 15, 0.0505);  // it 14: progress 0.5 -> 0.01 + 0.99 * 0.5
  expect_lr(*s, 20, 0.001);   // it 19: progress 1 -> cos_min_ratio
  expect_lr(*s, 40, 0.001);   // clamped
}

TEST(DeepSpeedSchedule, OneCycleLrAndMomentum) {
  auto s = ds(R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
                 "cycle_first_step_size": 4}})");
  expect_lr(*s, 0, 0.01);    // constructor
  expect_lr(*s, 1, 0.0325);  // b 1: x 0.125, scale 0.25
  expect_lr(*s, 4, 0.1);     // b 4: x 0.5, scale 1
  expect_lr(*s, 5, 0.0775);  // b 5: x 0.625, scale (0.625-1)/(0.5-1) = 0.75
  expect_lr(*s, 8, 0.01);    // b 8: next cycle, x 0
  expect_lr(*s, 9, 0.01);    // after the cycle, no decay configured
  ASSERT_TRUE(s->betas(0).has_value());
  EXPECT_FLOAT_EQ(s->betas(0)->first, 0.8f);  // constructor: cycle_min_mom
  EXPECT_FLOAT_EQ(s->betas(0)->second, 0.99f);
  EXPECT_FLOAT_EQ(s->betas(1)->first, 0.875f);  // 0.9 - 0.1 * 0.25
  EXPECT_FLOAT_EQ(s->betas(4)->first, 0.8f);
  EXPECT_FLOAT_EQ(s->betas(20)->first, 0.9f);  // after the cycle: cycle_max_mom

  auto decay = ds(R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
                     "cycle_first_step_size": 4, "decay_lr_rate": 0.5, "decay_step_size": 2,
                     "cycle_momentum": false}})");
  expect_lr(*decay, 9, 0.008);   // it 8: interval 1 -> 0.01 / (1 + 0.5 * 0.5)
  expect_lr(*decay, 12, 0.005);  // it 11: interval 4 -> 0.01 / (1 + 0.5 * 2)
  EXPECT_FALSE(decay->betas(3).has_value());

  auto stairs = ds(R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
                      "cycle_first_step_size": 4, "cycle_first_stair_count": 2}})");
  expect_lr(*stairs, 1, 0.01);   // position 1 * 2 / 4 = 0.5 -> stair 0
  expect_lr(*stairs, 2, 0.055);  // position 1 -> scale 0.5
  expect_lr(*stairs, 4, 0.1);
  expect_lr(*stairs, 5, 0.055);  // second half: (8 - 5) * 2 / 4 = 1.5 -> 0.5
}

TEST(DeepSpeedSchedule, LrRangeTest) {
  auto s = ds(R"({"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.001,
                 "lr_range_test_step_size": 10, "lr_range_test_step_rate": 2}})");
  expect_lr(*s, 0, 0.001);
  expect_lr(*s, 1, 0.0012);  // 0.001 * (1 + 2 * 1/10)
  expect_lr(*s, 10, 0.003);  // 0.001 * (1 + 2 * 10/10)
  auto stair = ds(R"({"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.001,
                     "lr_range_test_step_size": 10, "lr_range_test_step_rate": 2,
                     "lr_range_test_staircase": true}})");
  expect_lr(*stair, 9, 0.001);   // floor(9/10) = 0
  expect_lr(*stair, 10, 0.003);  // floor(10/10) = 1
}

TEST(DeepSpeedSchedule, AutoValuesComeFromTheRun) {
  ScheduleRun run;
  run.total_steps = 20;
  run.warmup_steps = 10;
  auto s = ds(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": "auto", "warmup_min_lr": "auto",
                 "warmup_max_lr": "auto", "warmup_num_steps": "auto", "warmup_type": "linear"}})",
              0.01f, run);
  expect_lr(*s, 16, 0.005);
  expect_error(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}})", "total_num_steps");
}

// Issue 40: "auto" warmup_num_steps in a run with no warmup (HF's default warmup_steps 0,
// which its DeepSpeed integration writes as 0) was refused against the docs; DeepSpeed
// counts a warmup below 2 steps as 2.
TEST(DeepSpeedSchedule, AutoWarmupOfARunWithoutWarmupIsAccepted) {
  ScheduleRun run;
  run.total_steps = 20;
  run.warmup_steps = 0;
  auto s =
      ds(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": "auto", "warmup_num_steps": "auto"}})", 0.1f, run);
  EXPECT_NE(s->describe().find("warmup_num_steps=2"), std::string::npos) << s->describe();
  auto zero = ds(R"({"type": "WarmupLR", "params": {"warmup_num_steps": 0}})", 0.1f);
  EXPECT_NE(zero->describe().find("2"), std::string::npos) << zero->describe();
}

// A decay rate that moves the momentum out of [0, 1) within the run's steps is refused at
// start-up (before the first step), naming the key and the step; within range it loads.
TEST(DeepSpeedSchedule, DecayThatLeavesTheOptimizersRangeIsRefusedAtStart) {
  const std::string growing = R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
      "cycle_first_step_size": 4, "decay_step_size": 1, "decay_mom_rate": 0.1}})";
  ScheduleRun run;
  // The cycle is 8 steps; update k uses it = k - 1, and after the cycle beta1 is
  // 0.9 * (1 + 0.1 * (it - 7)): 0.99 at the 10th update, 1.08 at the 11th.
  run.total_steps = 11;
  expect_error(growing, "decay_mom_rate", run);
  expect_error(growing, "beta1", run);
  run.total_steps = 10;
  EXPECT_NO_THROW(ds(growing, 0.1f, run));
  const std::string shrinking = R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
      "cycle_first_step_size": 4, "decay_step_size": 1, "decay_mom_rate": -0.5}})";
  run.total_steps = 100;
  expect_error(shrinking, "decay_mom_rate", run);
}

TEST(DeepSpeedSchedule, BadBlocksNameTheKey) {
  expect_error(R"({"type": "WarmupLR", "params": {"warmup_max_lr": 0.1, "warmup_steps": 5}})",
               "scheduler.params.warmup_steps");
  expect_error(R"({"type": "WarmupLR", "params": {"warmup_type": "cosine"}})", "warmup_type");
  expect_error(R"({"type": "WarmupLR", "params": {"warmup_num_steps": -1}})", "warmup_num_steps");
  expect_error(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 0}})", "total_num_steps");
  expect_error(R"({"type": "WarmupLR", "params": {"warmup_num_steps": 2.5}})", "warmup_num_steps");
  expect_error(R"({"type": "WarmupLR", "params": {"warmup_max_lr": "fast"}})", "warmup_max_lr");
  expect_error(R"({"type": "WarmupDecayLR", "params": {}})", "total_num_steps");
  expect_error(R"({"type": "WarmupCosineLR", "params": {}})", "total_num_steps");
  expect_error(R"({"type": "OneCycle", "params": {"cycle_max_lr": 0.1}})", "cycle_min_lr");
  expect_error(R"({"type": "warmuplr", "params": {}})", "scheduler.type");
  expect_error(R"({"type": "WarmupLR", "parameters": {}})", "scheduler.parameters");
  expect_error(R"({"type": "WarmupLR", "params": {"last_batch_iteration": 5}})", "last_batch_iteration");
}

TEST(HfSchedule, ConstantAndConstantWithWarmup) {
  auto c = make_hf_schedule("constant", 0.1f, 4, 10);
  expect_lr(*c, 0, 0.1);
  expect_lr(*c, 50, 0.1);
  auto w = make_hf_schedule("constant_with_warmup", 0.1f, 4, 10);
  expect_lr(*w, 0, 0.0);
  expect_lr(*w, 2, 0.05);
  expect_lr(*w, 4, 0.1);
  expect_lr(*w, 50, 0.1);
}

TEST(HfSchedule, Linear) {
  auto s = make_hf_schedule("linear", 0.1f, 4, 10);
  expect_lr(*s, 0, 0.0);
  expect_lr(*s, 2, 0.05);
  expect_lr(*s, 4, 0.1);   // (10 - 4) / 6
  expect_lr(*s, 7, 0.05);  // 3 / 6
  expect_lr(*s, 10, 0.0);
  expect_lr(*s, 12, 0.0);
  auto no_warmup = make_hf_schedule("linear", 0.1f, 0, 10);
  expect_lr(*no_warmup, 0, 0.1);
  expect_lr(*no_warmup, 5, 0.05);
}

TEST(HfSchedule, CosineAndCosineWithMinLr) {
  auto s = make_hf_schedule("cosine", 0.1f, 4, 10);
  expect_lr(*s, 2, 0.05);
  expect_lr(*s, 5, 0.1 * 0.5 * (1 + std::cos(M_PI / 6)));  // progress 1/6: 0.0933013
  expect_lr(*s, 7, 0.05);                                  // progress 1/2
  expect_lr(*s, 10, 0.0);
  auto m = make_hf_schedule("cosine_with_min_lr", 0.1f, 4, 10, 0.1f);
  expect_lr(*m, 7, 0.055);  // 0.5 * 0.9 + 0.1
  expect_lr(*m, 10, 0.01);
  auto same = make_hf_schedule("cosine", 0.1f, 4, 10, 0.1f);
  expect_lr(*same, 7, 0.055);
}

// transformers/optimization.py with TrainingArguments' defaults (no lr_scheduler_kwargs).
TEST(HfSchedule, CosineWithRestartsPolynomialInverseSqrt) {
  auto r = make_hf_schedule("cosine_with_restarts", 0.1f, 4, 10);  // num_cycles 1
  expect_lr(*r, 2, 0.05);
  expect_lr(*r, 5, 0.1 * 0.5 * (1 + std::cos(M_PI / 6)));
  expect_lr(*r, 7, 0.05);
  expect_lr(*r, 10, 0.0);  // progress >= 1: 0, where plain cosine would rise again
  expect_lr(*r, 12, 0.0);
  auto p = make_hf_schedule("polynomial", 0.1f, 4, 10);  // lr_end 1e-7, power 1
  expect_lr(*p, 2, 0.05);
  expect_lr(*p, 7, (0.1 - 1e-7) * 0.5 + 1e-7);
  expect_lr(*p, 10, 1e-7);
  expect_lr(*p, 12, 1e-7);
  auto q = make_hf_schedule("inverse_sqrt", 0.1f, 4, 10);  // timescale = warmup
  expect_lr(*q, 2, 0.05);
  expect_lr(*q, 4, 0.1);
  expect_lr(*q, 16, 0.05);  // 1 / sqrt(16 / 4)
  auto n = make_hf_schedule("inverse_sqrt", 0.1f, 0, 0);  // timescale 10,000; needs no total
  expect_lr(*n, 0, 0.1);
  expect_lr(*n, 30000, 0.05);  // 1 / sqrt((30000 + 10000) / 10000)
}

TEST(HfSchedule, BadArguments) {
  EXPECT_THROW(make_hf_schedule("reduce_lr_on_plateau", 0.1f, 0, 10), Error);
  EXPECT_THROW(make_hf_schedule("polynomial", 1e-8f, 0, 10), Error);  // below HF's lr_end 1e-7
  EXPECT_THROW(make_hf_schedule("polynomial", 0.1f, 0, 0), Error);
  EXPECT_THROW(make_hf_schedule("cosine_with_restarts", 0.1f, 0, 0), Error);
  EXPECT_THROW(make_hf_schedule("linear", 0.1f, 0, 0), Error);
  EXPECT_THROW(make_hf_schedule("linear", 0.1f, 0, 10, 0.1f), Error);
  EXPECT_THROW(make_hf_schedule("constant", 0.1f, -1, 10), Error);
  EXPECT_NO_THROW(make_hf_schedule("", 0.1f, 0, 0));  // "" = constant
}

// The params table is consistent: each schedule names a param once, a default another
// param's value names one the schedule takes, defaults lie in their ranges, and every
// schedule builds from its defaults (plus its required params) through the table.
TEST(DeepSpeedSchedule, ParamsTableIsConsistent) {
  for (config::ScheduleType t : config::schedule_types()) {
    const std::vector<std::string> names = config::scheduler_param_names(t);
    json params = json::object();
    for (size_t i = 0; i < names.size(); ++i) {
      for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]) << config::schedule_type_name(t);
      const config::SchedulerParamKey& k = *config::scheduler_param(t, names[i]);
      if (k.default_rule == config::SchedulerDefault::SameAs) {
        EXPECT_NE(config::scheduler_param(t, k.same_as), nullptr) << k.key;
      }
      if (k.default_rule == config::SchedulerDefault::Value && k.kind != config::SchedulerParamKind::WarmupType && k.refused.empty()) {
        EXPECT_EQ(config::scheduler_range_error(k, k.default_value), "") << k.key;
      }
      if (k.default_rule == config::SchedulerDefault::Required) params[k.key] = 10;
    }
    const auto s = make_deepspeed_schedule(json{{"type", config::schedule_type_name(t)}, {"params", params}}, 0.1f,
                                           "ds_config.json");
    EXPECT_TRUE(std::isfinite(s->lr(5))) << s->describe();
  }
  // Defaults the schedules read from the table: WarmupDecayLR's warmup_max_lr is 0.001,
  // WarmupLR's the optimizer's lr; OneCycle's second half defaults to its first.
  const auto decay = ds(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": 100}})", 0.5f);
  EXPECT_NE(decay->describe().find("warmup_max_lr=0.001"), std::string::npos) << decay->describe();
  const auto warm = ds(R"({"type": "WarmupLR", "params": {}})", 0.5f);
  EXPECT_NE(warm->describe().find("warmup_max_lr=0.5"), std::string::npos) << warm->describe();
  const auto cycle = ds(R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
                 "cycle_first_step_size": 4}})");
  EXPECT_NE(cycle->describe().find("cycle_second_step_size=4"), std::string::npos) << cycle->describe();
  expect_error(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "cos_min_ratio": 1.5}})",
               "cos_min_ratio: must be in [0, 1]");
  expect_error(R"({"type": "OneCycle", "params": {"cycle_min_lr": -1, "cycle_max_lr": 0.1}})",
               "cycle_min_lr: must be >= 0");
}
