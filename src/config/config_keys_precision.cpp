// The "fp16" and "bf16" tables (top level; "bfloat16" is the bf16 section's alias, handled
// where the section is found). What a row cannot say stays in ds_config.cpp: the ranges
// with their own messages (initial_scale_power 0..64, loss_scale 0 or positive) and
// "fp16 and bf16 both enabled".
#include "config/config_keys.h"

namespace zt::config {

namespace {

template <class S>
SectionKey<S> row(std::string key, KeyType type, double dflt, std::string dflt_text, double min_value,
                  AutoRule auto_rule, KeyStatus status, KeyField<S> target, std::string doc) {
  return key_row<S>(std::move(key), {}, type, dflt, std::move(dflt_text), min_value, auto_rule, status, target,
                    std::move(doc));
}

// Accepted, no effect here: warns when set to anything but the default (inert_keys.cpp).
template <class S>
SectionKey<S> accepted(std::string key, double dflt, std::string dflt_text, KeyField<S> target, std::string why,
                       std::string doc) {
  SectionKey<S> k = row<S>(std::move(key), KeyType::Bool, dflt, std::move(dflt_text), kNoMinimum, AutoRule::None,
                           KeyStatus::Accepted, target, std::move(doc));
  k.inert_when = InertWhen::NotDefault;
  k.inert_why = std::move(why);
  return k;
}

template <class S>
SectionKey<S> refused(std::string key, KeyField<S> target, std::string what, std::string doc) {
  SectionKey<S> k = row<S>(std::move(key), KeyType::Bool, 0, "false", kNoMinimum, AutoRule::None, KeyStatus::Refused,
                           target, std::move(doc));
  k.refuse_above = 0;
  k.refused_what = std::move(what);
  return k;
}

std::vector<Fp16Key> make_fp16_table() {
  using F = Fp16Section;
  const auto B = KeyType::Bool, I = KeyType::Int, N = KeyType::Number;
  const auto R = KeyStatus::Resolved;
  const auto none = AutoRule::None;
  std::vector<Fp16Key> t = {
      row<F>("enabled", B, 0, "false", kNoMinimum, AutoRule::RunPrecision, R, &F::enabled, "resolved (auto ok)"),
      row<F>("loss_scale", N, 0, "0 (dynamic; > 0 static)", kNoMinimum, none, R, &F::loss_scale, "resolved"),
      row<F>("initial_scale_power", I, 16, "16", kNoMinimum, none, R, &F::initial_scale_power, "resolved (0..64)"),
      row<F>("loss_scale_window", I, 1000, "1000", 1, none, R, &F::loss_scale_window, "resolved"),
      row<F>("hysteresis", I, 2, "2", 1, none, R, &F::hysteresis, "resolved"),
      row<F>("consecutive_hysteresis", B, 0, "false", kNoMinimum, none, R, &F::consecutive_hysteresis, "resolved"),
      row<F>("min_loss_scale", N, 1, "1", 1e-30, none, R, &F::min_loss_scale, "resolved"),
      accepted<F>("auto_cast", 0, "false", &F::auto_cast, "the model computes in fp16 throughout",
                  "accepted: the model computes in fp16 throughout (warning when true)"),
      refused<F>("fp16_master_weights_and_grads", &F::master_weights_and_grads,
                 "fp16 master weights is not supported by zerotrain; remove the key: master weights are always fp32 "
                 "in the rank's partition",
                 "refused when true (master weights are fp32)"),
  };
  return t;
}

std::vector<Bf16Key> make_bf16_table() {
  using F = Bf16Section;
  const auto B = KeyType::Bool;
  const auto R = KeyStatus::Resolved;
  std::vector<Bf16Key> t = {
      row<F>("enabled", B, 0, "false", kNoMinimum, AutoRule::RunPrecision, R, &F::enabled, "resolved (auto ok)"),
      row<F>("check_grad_overflow", B, 1, "true", kNoMinimum, AutoRule::None, R, &F::check_grad_overflow,
             "resolved: a bf16 step whose gradients hold inf/nan is skipped (no update, no LR step; a global step all "
             "the same); 3 in a row stop the run (exit 2); false: the first one stops it"),
      accepted<F>("immediate_grad_update", 0, "false", &F::immediate_grad_update,
                  "gradients are applied at the boundary",
                  "accepted: updates happen at the accumulation boundary (warning when true)"),
      refused<F>("bf16_master_weights_and_grads", &F::master_weights_and_grads,
                 "bf16 master weights / optimizer states is not supported by zerotrain; remove "
                 "bf16_master_weights_and_grads / bf16_optimizer_states: master weights and states are fp32",
                 "refused when true"),
      refused<F>("bf16_optimizer_states", &F::optimizer_states,
                 "bf16 master weights / optimizer states is not supported by zerotrain; remove "
                 "bf16_master_weights_and_grads / bf16_optimizer_states: master weights and states are fp32",
                 "refused when true"),
  };
  return t;
}

}  // namespace

const std::vector<Fp16Key>& fp16_keys() {
  static const std::vector<Fp16Key> table = make_fp16_table();
  return table;
}

const std::vector<Bf16Key>& bf16_keys() {
  static const std::vector<Bf16Key> table = make_bf16_table();
  return table;
}

}  // namespace zt::config
