// The "optimizer.params" table: one row per param, with the optimizer types that take it.
// The params block's known keys (per type, with did-you-mean), reading, ranges, refusals,
// "auto" and the doc table come from the rows. What a row cannot say stays in
// ds_config.cpp: "betas" (an array of two, each may be "auto"; Lion's default beta2 is
// 0.99), AdamW's adam_w_mode always on, and nesterov needing momentum.
#include <algorithm>

#include "config/config_keys.h"

namespace zt::config {

namespace {

using P = OptimizerParams;
using zero::OptimizerType;

OptimizerParamKey param(std::string key, std::vector<OptimizerType> types, KeyType type, double dflt,
                        std::string dflt_text, double min_value, AutoRule auto_rule, KeyStatus status,
                        KeyField<P> target, std::string doc) {
  return {key_row<P>(std::move(key), {}, type, dflt, std::move(dflt_text), min_value, auto_rule, status, target,
                     std::move(doc)),
          std::move(types)};
}

std::vector<OptimizerParamKey> make_table() {
  const auto B = KeyType::Bool, N = KeyType::Number;
  const auto R = KeyStatus::Resolved, A = KeyStatus::Accepted;
  const auto none = AutoRule::None, run = AutoRule::FromRun;
  const std::vector<OptimizerType> all = {OptimizerType::Adam, OptimizerType::AdamW, OptimizerType::SGD,
                                          OptimizerType::Lion};
  const std::vector<OptimizerType> adam = {OptimizerType::Adam, OptimizerType::AdamW};
  const std::vector<OptimizerType> betas = {OptimizerType::Adam, OptimizerType::AdamW, OptimizerType::Lion};
  const std::vector<OptimizerType> sgd = {OptimizerType::SGD};
  std::vector<OptimizerParamKey> t = {
      param("lr", all, N, 1e-3, "the run's learning_rate, else 1e-3", 0, run, R, &P::lr, "resolved (auto ok)"),
      param("betas", betas, KeyType::Object, 0, "[0.9, 0.999]; Lion [0.9, 0.99]", kNoMinimum, none, R, std::monostate{},
            "resolved (auto ok, each or both); each in [0, 1)"),
      param("eps", adam, N, 1e-8, "1e-8", 0, run, R, &P::eps, "resolved (auto ok)"),
      param("weight_decay", all, N, 0, "0", 0, run, R, &P::weight_decay, "resolved (auto ok)"),
      param("adam_w_mode", adam, B, 1, "true", kNoMinimum, none, R, &P::adam_w_mode,
            "resolved (AdamW is always decoupled; Adam with false adds L2 to the gradient)"),
      param("bias_correction", adam, B, 1, "true", kNoMinimum, none, R, &P::bias_correction, "resolved"),
      param("amsgrad", adam, B, 0, "false", kNoMinimum, none, KeyStatus::Refused, &P::amsgrad, "refused when true"),
      param("torch_adam", adam, KeyType::Any, 0, "false", kNoMinimum, none, A, std::monostate{},
            "accepted (one fused kernel per unit either way)"),
      param("fused", adam, KeyType::Any, 0, "—", kNoMinimum, none, A, std::monostate{}, "accepted (as above)"),
      param("set_grad_none", adam, KeyType::Any, 0, "—", kNoMinimum, none, A, std::monostate{},
            "accepted (gradients are flat buffers, zeroed in place)"),
      param("fp32_optimizer_states", adam, KeyType::Any, 0, "—", kNoMinimum, none, A, std::monostate{},
            "accepted (optimizer states are fp32 unless master_weights is false)"),
      param("momentum", sgd, N, 0, "0", 0, none, R, &P::momentum, "resolved"),
      param("dampening", sgd, N, 0, "0", kNoMinimum, none, R, &P::dampening, "resolved"),
      param("nesterov", sgd, B, 0, "false", kNoMinimum, none, R, &P::nesterov, "resolved (needs momentum > 0)"),
  };
  for (OptimizerParamKey& k : t)
    if (k.row.key == "amsgrad") {
      k.row.refuse_above = 0;
      k.row.refused_what = "AMSGrad is not supported by zerotrain; remove amsgrad or set it false";
    }
  return t;
}

}  // namespace

bool OptimizerParamKey::takes(zero::OptimizerType t) const {
  return std::find(types.begin(), types.end(), t) != types.end();
}

const std::vector<OptimizerParamKey>& optimizer_param_keys() {
  static const std::vector<OptimizerParamKey> table = make_table();
  return table;
}

std::vector<std::string> optimizer_param_spellings(zero::OptimizerType type) {
  std::vector<std::string> out;
  for (const OptimizerParamKey& k : optimizer_param_keys())
    if (k.takes(type)) out.push_back(k.row.key);
  return out;
}

}  // namespace zt::config
