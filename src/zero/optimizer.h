// The optimizer interface over the parameter registry. An optimizer owns its state for
// the parameters this rank updates (today: all of them; with ZeRO 1-3: the rank's
// partition) and exposes that state as named tensors so checkpoints save and restore
// it without knowing the optimizer.
//
// Mixed precision: when parameters are stored in bf16/f16 the optimizer keeps an f32
// master copy (state tensor "<unit>.master") and rounds it into the parameters after each
// update. The master is copied from the parameters when the optimizer is built and again
// right before the first update (steps_taken() == 0), so weights loaded after building
// the optimizer are picked up; a resumed run restores it through state_tensors().
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor.h"
#include "model/registry.h"
#include "zero/partition.h"

namespace zt::zero {

enum class OptimizerType { AdamW, Adam, SGD, Lion };

// 16-bit parameters: an f32 master copy with f32 state (F32, DeepSpeed's mixed precision),
// or none, with the state in the parameter dtype (None, bf16 only; see above). f32
// parameters are their own master either way, with f32 state.
enum class MasterWeights { F32, None };

const char* optimizer_type_name(OptimizerType type);

// What a ds_config "optimizer" block (or the run config) asks for, resolved.
// The bools mirror DeepSpeed's JSON keys of the same names.
struct OptimizerSpec {
  OptimizerType type = OptimizerType::AdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;  // Lion: 0.9, 0.99
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  // Adam only: true = decoupled decay (AdamW), false = L2 added to the gradient
  // (torch.optim.Adam). Type AdamW is always decoupled.
  bool adam_w_mode = true;
  bool bias_correction = true;
  float momentum = 0.0f;   // SGD
  bool nesterov = false;   // SGD
  float dampening = 0.0f;  // SGD
  // The run config's master_weights (true: F32, false: None).
  MasterWeights master_weights = MasterWeights::F32;
};

// Reads and writes a slice of state kept outside memory (NVMe-swapped optimizer state,
// zero/state_store.h): element ranges, by offset from the slice's start, to and from host
// tensors of the slice's dtype.
class SliceIo {
 public:
  virtual ~SliceIo() = default;
  virtual void read(int64_t offset, const Tensor& dst) = 0;
  virtual void write(int64_t offset, const Tensor& src) = 0;
};

// A tensor that is elements [begin, begin + numel) of a named flat buffer. With `io`, the
// slice is not in memory: `data` has its shape and dtype but no data, and `io` moves it.
struct StateSlice {
  std::string name;
  Tensor data;
  int64_t begin = 0;
  std::shared_ptr<SliceIo> io{};
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter with learning rate lr; gradients are multiplied by
  // grad_scale first (1 / loss scale x clip coefficient). Parameters marked
  // WeightDecay::Skip get no decay.
  virtual void step(float lr, float grad_scale) = 0;
  virtual int64_t steps_taken() const = 0;
  // Named state tensors (e.g. "block.3.exp_avg"), this rank's partition of each unit, for checkpoints.
  // Restoring writes into these same tensors. Names: "<unit>.master" (16-bit parameters
  // only), and per optimizer "<unit>.exp_avg", "<unit>.exp_avg_sq" (Adam/AdamW),
  // "<unit>.momentum_buffer" (SGD with momentum), "<unit>.exp_avg" (Lion).
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() = 0;
  // The same tensors with where each starts in its unit's flat buffer (ZeRO partitions).
  virtual std::vector<StateSlice> state_slices() = 0;
  virtual void set_steps_taken(int64_t steps) = 0;
  // Bytes of state held, for memory reports.
  virtual size_t state_bytes() const = 0;
  virtual const OptimizerSpec& spec() const = 0;
  // Replaces (beta1, beta2) for later steps: DeepSpeed's OneCycle schedule cycles them
  // (LrSchedule::betas). Optimizers without betas (SGD) ignore it, as DeepSpeed disables
  // momentum cycling for them.
  virtual void set_betas(float beta1, float beta2) = 0;
  // Copies this rank's partition of the parameters into the f32 master (no-op without
  // one): after restoring a checkpoint saved without master weights.
  virtual void init_master_from_params() = 0;
};

// Validates the spec (errors name the ds_config key and the fix) and builds the optimizer
// over `partitions` (the ZeRO engine's; empty: every unit whole).
std::unique_ptr<Optimizer> make_optimizer(model::ParameterRegistry& registry, const OptimizerSpec& spec,
                                          PartitionFn partitions = {});
// The same, as the flat-unit base class (zero/optimizer_base.h) whose units can be
// stepped one at a time (ZeRO-Offload's host optimizer).
class FlatOptimizer;
class StateStore;
// store: where the state lives between steps (null: memory on the partitions' device;
// zero/state_store.h's NvmeStore: swapped to a drive).
std::unique_ptr<FlatOptimizer> make_flat_optimizer(model::ParameterRegistry& registry, const OptimizerSpec& spec,
                                                   PartitionFn partitions = {},
                                                   std::unique_ptr<StateStore> store = nullptr);

// sqrt(sum of squares of every gradient), accumulated in double.
double global_grad_norm(model::ParameterRegistry& registry);

}  // namespace zt::zero
