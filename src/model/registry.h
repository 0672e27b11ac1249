// The parameter registry: a model is a list of flat units (embeddings, block 0..L-1,
// final norm + head). Each unit owns one flat parameter buffer and one flat gradient
// buffer, padded so that it splits evenly over `shard_count` ranks; every named
// parameter is a view at a fixed offset. Load, save, sharding and the optimizer all
// visit the same entries, so they agree on names, shapes and offsets by construction.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/weight_layout.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "model/field.h"

namespace zt::model {

enum class WeightDecay { Apply, Skip };  // HF Trainer: no decay for biases and norm gains

enum class Init {
  Normal,  // N(0, std)
  Zeros,
  Ones,
  // U(-1/sqrt(in), 1/sqrt(in)) for a [out, in] matrix: torch's kaiming_uniform_ with
  // a = sqrt(5), nn.Linear's default and PEFT's lora_A.
  KaimingUniform,
};

// One parameter, as model/weights.h's table yields it.
struct ParamSpec {
  std::string name;                     // HF tensor name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Field field = Field::TokenEmbedding;  // what the model uses it as (several HF tensors may form one field)
  Shape shape;                          // our shape (embedding/head rows padded to a multiple of 128)
  Shape hf_shape;                       // shape in HF files (leading rows <= shape's); equals shape when unpadded
  WeightDecay decay = WeightDecay::Apply;
  Init init = Init::Normal;
  float init_std = 0.02f;
  // Packed: placed right after the previous parameter with no alignment gap, so that
  // several HF tensors form one matrix (Llama's q/k/v projections become one GEMM).
  enum class Placement { Aligned, Packed } placement = Placement::Aligned;
  // For linear weights: how `shape` is read (GPT-2's Conv1D weights are [in, out], as in
  // HF files, so they load without a transpose).
  WeightLayout layout = WeightLayout::OutIn;
  // How HF files hold it: a file whose layout differs from `layout` holds the transpose.
  WeightLayout hf_layout = WeightLayout::OutIn;
  TpSplit tp_split = TpSplit::None;
  // A trained copy of another tensor (LoRA's modules_to_save of a tied head): the tensor its
  // values start from, by HF name (its init's seed, its tensor in the files); empty: `name`.
  std::string source_name;
  const std::string& value_source() const { return source_name.empty() ? name : source_name; }
};

struct ParamEntry {
  ParamSpec spec;
  int64_t offset = 0;  // elements from the start of the unit's flat buffer
  Tensor value;        // view into the unit's parameter buffer
  Tensor grad;         // view into the unit's gradient buffer (undefined until allocated)
  const std::string& name() const { return spec.name; }
  int64_t numel() const { return shape_numel(spec.shape); }
};

// Whether the optimizer trains a unit. A frozen unit (LoRA's base model) holds parameters
// only: no gradient buffer, no f32 master, no optimizer state, no gradient reduction. The
// flag is per unit because every ZeRO mechanism (slices, buckets, reduce-scatter, the
// optimizer's state, checkpoints) is per unit: a trainable part of a model is a unit of
// its own (LoRA adapters: one unit per block, model/lora.h).
enum class Training { Trainable, Frozen };

class Unit {
 public:
  Unit(std::string name, std::vector<ParamSpec> specs, int shard_count);

  const std::string& name() const { return name_; }
  int64_t numel() const { return numel_; }                // sum of parameters, with alignment gaps
  int64_t padded_numel() const { return padded_numel_; }  // multiple of shard_count
  std::vector<ParamEntry>& params() { return params_; }
  const std::vector<ParamEntry>& params() const { return params_; }
  ParamEntry* find(const std::string& name);

  // Allocates (zeroed) storage and points every entry at it.
  void allocate_params(DType dtype, Device device);
  // Storage that is about to be overwritten whole (a ZeRO-3 gather): not zeroed.
  void allocate_params_uninitialized(DType dtype, Device device);
  // ZeRO-3 frees a unit's full parameters between uses; entries become undefined views.
  void release_params();
  // A frozen unit never has gradients: allocate_grads is a logic error there.
  void allocate_grads(DType dtype, Device device);
  void release_grads();
  // Freezing releases the gradient buffer.
  void set_training(Training training);
  Training training() const { return training_; }
  bool frozen() const { return training_ == Training::Frozen; }
  bool has_params() const { return param_buffer_.data() != nullptr; }
  bool has_grads() const { return grad_buffer_.data() != nullptr; }
  // The whole flat buffers (padded_numel elements).
  Tensor flat_params() const;
  Tensor flat_grads() const;
  DType param_dtype() const { return param_dtype_; }
  DType grad_dtype() const { return grad_dtype_; }
  Device device() const { return device_; }
  // Records the storage dtype and device without allocating (the ZeRO-3 engine allocates
  // one unit at a time).
  void set_storage(DType param_dtype, DType grad_dtype, Device device) {
    param_dtype_ = param_dtype;
    grad_dtype_ = grad_dtype;
    device_ = device;
  }

 private:
  std::string name_;
  std::vector<ParamEntry> params_;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  Buffer param_buffer_;
  Buffer grad_buffer_;
  DType param_dtype_ = DType::F32;
  DType grad_dtype_ = DType::F32;
  Device device_{};
  Training training_ = Training::Trainable;
};

class ParameterRegistry {
 public:
  Unit& add_unit(std::string name, std::vector<ParamSpec> specs, int shard_count);
  std::vector<std::unique_ptr<Unit>>& units() { return units_; }
  const std::vector<std::unique_ptr<Unit>>& units() const { return units_; }
  Unit& unit(size_t i) { return *units_.at(i); }
  const Unit& unit(size_t i) const { return *units_.at(i); }
  size_t size() const { return units_.size(); }

  // Visits every parameter in registry order (unit order, then declaration order).
  void for_each(const std::function<void(Unit&, ParamEntry&)>& fn);
  void for_each(const std::function<void(const Unit&, const ParamEntry&)>& fn) const;
  // nullptr when absent.
  ParamEntry* find(const std::string& name);
  int64_t total_numel() const;  // parameters only (no padding), counting padded vocab rows

 private:
  std::vector<std::unique_ptr<Unit>> units_;
};

}  // namespace zt::model
