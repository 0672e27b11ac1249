// make_optimizer: validation of the resolved spec (ranges as torch.optim checks them, with
// the ds_config key in every message) and the choice of class.
#include "zero/optimizer.h"

#include <cmath>

#include "core/error.h"
#include "ops/elementwise.h"
#include "zero/adamw.h"
#include "zero/lion.h"
#include "zero/sgd.h"

namespace zt::zero {
namespace {

void check_range(const char* key, float value, float lo, const char* lo_text, float hi, const char* fix) {
  if (!std::isfinite(value) || value < lo || value > hi)
    ZT_THROW_INPUT("optimizer.params.", key, " = ", value, " is out of range (", lo_text, "): ", fix);
}

void check_betas(const OptimizerSpec& s) {
  // torch.optim: 0 <= beta < 1.
  if (!(s.beta1 >= 0.0f && s.beta1 < 1.0f) || !(s.beta2 >= 0.0f && s.beta2 < 1.0f))
    ZT_THROW_INPUT("optimizer.params.betas = [", s.beta1, ", ", s.beta2,
                   "] is out of range: each beta must be in [0, 1), e.g. [0.9, 0.999]");
}

}  // namespace

const char* optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::AdamW:
      return "AdamW";
    case OptimizerType::Adam:
      return "Adam";
    case OptimizerType::SGD:
      return "SGD";
    case OptimizerType::Lion:
      return "Lion";
  }
  return "?";
}

std::unique_ptr<Optimizer> make_optimizer(model::ParameterRegistry& registry, const OptimizerSpec& spec,
                                          PartitionFn partitions) {
  return make_flat_optimizer(registry, spec, std::move(partitions));
}

std::unique_ptr<FlatOptimizer> make_flat_optimizer(model::ParameterRegistry& registry, const OptimizerSpec& spec,
                                                   PartitionFn partitions, std::unique_ptr<StateStore> store) {
  if (spec.master_weights == MasterWeights::None) {
    for (const auto& u : registry.units())
      if (u->param_dtype() == DType::F16)
        ZT_THROW_INPUT(
            "master_weights: false with fp16 parameters is not supported (fp16 needs f32 master "
            "weights under loss scaling): use bf16 or keep master weights (master_weights: true)");
  }
  check_range("lr", spec.lr, 0.0f, ">= 0", INFINITY, "set a non-negative learning rate");
  check_range("weight_decay", spec.weight_decay, 0.0f, ">= 0", INFINITY, "set a non-negative weight decay");
  switch (spec.type) {
    case OptimizerType::AdamW:
    case OptimizerType::Adam:
      check_betas(spec);
      check_range("eps", spec.eps, 0.0f, ">= 0", INFINITY, "set a small positive eps such as 1e-8");
      return std::make_unique<AdamW>(registry, spec, std::move(partitions), std::move(store));
    case OptimizerType::SGD:
      check_range("momentum", spec.momentum, 0.0f, ">= 0", INFINITY, "set momentum in [0, 1), e.g. 0.9");
      check_range("dampening", spec.dampening, -INFINITY, "finite", INFINITY, "set dampening, usually 0");
      if (spec.nesterov && (spec.momentum <= 0.0f || spec.dampening != 0.0f))
        ZT_THROW_INPUT("optimizer.params.nesterov = true needs momentum > 0 and dampening = 0 (got momentum ",
                       spec.momentum, ", dampening ", spec.dampening,
                       "): set a momentum such as 0.9 and dampening 0, or nesterov false");
      return std::make_unique<Sgd>(registry, spec, std::move(partitions), std::move(store));
    case OptimizerType::Lion:
      check_betas(spec);
      return std::make_unique<Lion>(registry, spec, std::move(partitions), std::move(store));
  }
  ZT_THROW_INPUT("unknown optimizer type ", static_cast<int>(spec.type));
}

double global_grad_norm(model::ParameterRegistry& registry) {
  double sum = 0.0;
  for (auto& u : registry.units())
    if (u->has_grads()) sum += ops::sum_of_squares(u->flat_grads());
  return std::sqrt(sum);
}

}  // namespace zt::zero
