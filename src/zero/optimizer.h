// The optimizer interface over the parameter registry. An optimizer owns its state for
// the parameters this rank updates (today: all of them; with ZeRO 1-3: the rank's
// partition) and exposes that state as named tensors so checkpoints save and restore
// it without knowing the optimizer.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor.h"
#include "model/registry.h"

namespace zt::zero {

enum class OptimizerType { AdamW, Adam, SGD, Lion };

// What a ds_config "optimizer" block (or the run config) asks for, resolved.
struct OptimizerSpec {
  OptimizerType type = OptimizerType::AdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;  // Lion: 0.9, 0.99
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adam_w_mode = true;  // DeepSpeed: "Adam" with adam_w_mode=true is AdamW
  bool bias_correction = true;
  float momentum = 0.0f;    // SGD
  bool nesterov = false;    // SGD
  float dampening = 0.0f;   // SGD
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter with learning rate lr; gradients are multiplied by
  // grad_scale first (1 / loss scale x clip coefficient). Parameters marked
  // WeightDecay::Skip get no decay.
  virtual void step(float lr, float grad_scale) = 0;
  virtual int64_t steps_taken() const = 0;
  // Named state tensors (e.g. "block.3.exp_avg"), flat per unit, for checkpoints.
  // Restoring writes into these same tensors.
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() = 0;
  virtual void set_steps_taken(int64_t steps) = 0;
  // Bytes of state held, for memory reports.
  virtual size_t state_bytes() const = 0;
  virtual const OptimizerSpec& spec() const = 0;
};

std::unique_ptr<Optimizer> make_optimizer(model::ParameterRegistry& registry, const OptimizerSpec& spec);

}  // namespace zt::zero
