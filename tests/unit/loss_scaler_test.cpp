// LossScaler against scripted overflow sequences whose scale trajectories follow
// DeepSpeed's DynamicLossScaler.update_scale step by step (worked out in the comments).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "zero/loss_scaler.h"

using namespace zt;
using namespace zt::zero;

namespace {

LossScalerConfig dynamic_config(int power, int window, int hysteresis, bool consecutive, float min_scale) {
  LossScalerConfig c;
  c.enabled = true;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.min_loss_scale = min_scale;
  return c;
}

// 'c' = clean step, 'o' = overflow. Returns the scale after each update and checks the
// skip decision.
std::vector<float> run(LossScaler& s, const std::string& seq) {
  std::vector<float> out;
  for (char ch : seq) {
    const bool overflow = ch == 'o';
    EXPECT_EQ(s.update(overflow), overflow);
    out.push_back(s.scale());
  }
  return out;
}

}  // namespace

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  LossScalerConfig c;
  c.enabled = true;
  LossScaler s(c);
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0f);
  // 999 clean steps keep the scale; the 1000th doubles it.
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0f);
}

TEST(LossScaler, HysteresisDelaysTheDecreaseAndRefillsOnlyAtTheWindow) {
  LossScaler s(dynamic_config(4, 3, 2, false, 1.0f));
  // c c c: third clean step doubles (16 -> 32). o: hysteresis 2 -> 1, scale kept.
  // o: hysteresis used up, 32 -> 16. c c c: doubled at the third clean step since the
  // overflow, hysteresis refilled to 2. o: 2 -> 1. c: hysteresis stays 1 (not
  // consecutive). o: halves to 16. c. o: halves to 8.
  EXPECT_EQ(run(s, "cccoocccococo"), (std::vector<float>{16, 16, 32, 32, 16, 16, 16, 32, 32, 32, 16, 16, 8}));
  EXPECT_EQ(s.skipped_steps(), 5);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  LossScaler s(dynamic_config(4, 3, 2, true, 1.0f));
  // Same script; from step 11 on, each overflow follows a clean step that refilled the
  // hysteresis, so it only uses it up and the scale stays 32.
  EXPECT_EQ(run(s, "cccoocccococo"), (std::vector<float>{16, 16, 32, 32, 16, 16, 16, 32, 32, 32, 32, 32, 32}));
}

TEST(LossScaler, HysteresisOneHalvesAtEveryOverflowAndWindowCountsFromTheOverflow) {
  LossScaler s(dynamic_config(3, 2, 1, false, 1.0f));
  // 8; o -> 4; c (1 since overflow); c (2) -> 8; c; c -> 16; o -> 8; o -> 4.
  EXPECT_EQ(run(s, "occccoo"), (std::vector<float>{4, 4, 8, 8, 16, 8, 4}));
}

TEST(LossScaler, NeverBelowMinimumAndErrorWhenOverflowingThere) {
  LossScaler s(dynamic_config(2, 1000, 1, false, 3.0f));
  EXPECT_EQ(s.scale(), 4.0f);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 3.0f);  // max(4 / 2, 3)
  try {
    s.update(true);
    FAIL() << "expected an error at the minimum scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already at minimum"), std::string::npos) << e.what();
  }
}

TEST(LossScaler, HysteresisStillAbsorbsAnOverflowAtTheMinimum) {
  LossScaler s(dynamic_config(0, 1000, 2, false, 1.0f));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_TRUE(s.update(true));  // hysteresis 2 -> 1, no decrease needed
  EXPECT_THROW(s.update(true), Error);
}

TEST(LossScaler, StaticScaleNeverChangesButSkipsOverflowingSteps) {
  LossScalerConfig c;
  c.enabled = true;
  c.loss_scale = 128.0f;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(run(s, "oooocccc"), std::vector<float>(8, 128.0f));
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(LossScaler, DisabledIsScaleOneAndStillSkipsOverflow) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, RestoredStateContinuesIdentically) {
  const auto cfg = dynamic_config(5, 3, 2, false, 1.0f);
  LossScaler a(cfg);
  run(a, "ccocoo");
  LossScaler b(cfg);
  b.restore(a.state());
  const std::string rest = "ccccocccoo";
  EXPECT_EQ(run(a, rest), run(b, rest));
  EXPECT_EQ(a.skipped_steps(), b.skipped_steps());
  LossScaler::State bad = a.state();
  bad.scale = -1.0f;
  EXPECT_THROW(b.restore(bad), Error);
}

TEST(LossScaler, InvalidSettingsNameTheKey) {
  auto expect_key = [](LossScalerConfig c, const std::string& key) {
    try {
      LossScaler s(c);
      FAIL() << "expected an error for " << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  auto c = dynamic_config(16, 1000, 2, false, 1.0f);
  auto bad = c;
  bad.loss_scale_window = 0;
  expect_key(bad, "fp16.loss_scale_window");
  bad = c;
  bad.hysteresis = 0;
  expect_key(bad, "fp16.hysteresis");
  bad = c;
  bad.min_loss_scale = 0.0f;
  expect_key(bad, "fp16.min_loss_scale");
  bad = c;
  bad.initial_scale_power = 200;
  expect_key(bad, "fp16.initial_scale_power");
  bad = c;
  bad.loss_scale = -2.0f;
  expect_key(bad, "fp16.loss_scale");
}

TEST(GradsFinite, DetectsInfAndNanInAnyUnit) {
  model::ParameterRegistry reg;
  model::ParamSpec a;
  a.name = "a";
  a.shape = {10};
  model::ParamSpec b;
  b.name = "b";
  b.shape = {100};
  reg.add_unit("u0", {a}, 1);
  reg.add_unit("u1", {b}, 1);
  for (auto& u : reg.units()) {
    u->allocate_params(DType::F32, Device::cpu());
    u->allocate_grads(DType::BF16, Device::cpu());
    u->flat_grads().fill_f32(0.5f);
  }
  EXPECT_TRUE(grads_finite(reg));
  reg.find("b")->grad.set_f32(73, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(grads_finite(reg));
  reg.find("b")->grad.set_f32(73, 1.0f);
  EXPECT_TRUE(grads_finite(reg));
  reg.find("a")->grad.set_f32(0, std::nanf(""));
  EXPECT_FALSE(grads_finite(reg));
}
