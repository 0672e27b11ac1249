// `zerotrain lora merge`: a base HF model directory + a PEFT LoRA adapter -> the merged HF
// model directory, as PEFT's merge_and_unload() + save_pretrained give it:
//
//   W' = W + scaling * B @ A            (scaling: lora_alpha / r, or / sqrt(r) with rslora)
//
// for every adapted module of every layer, transposed for GPT-2's Conv1D weights ([in, out]
// in the files: PEFT's fan_in_fan_out); trained biases (bias "all" / "lora_only") and
// modules_to_save replace the base's tensors. The merge is done in f32 (the base is read
// into f32: 4 bytes per parameter of host memory) and written in the base files' dtype,
// with config.json, the base's generation_config.json and its tokenizer files, into one
// staging directory that replaces OUT atomically (model/hf_dir.h's save_pretrained).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "model/config.h"
#include "model/transformer.h"

namespace zt::model {

struct LoraMergeProgress {
  int64_t layer = 0, layers = 0;  // layer done (0-based) of layers
};

struct LoraMergeOptions {
  // The dtype written; when not given, the base files' dtype (PEFT keeps the base's).
  bool dtype_given = false;
  DType dtype = DType::F32;
  std::function<void(const LoraMergeProgress&)> on_layer;  // after each layer is merged
};

struct LoraMergeSummary {
  int64_t modules = 0;       // adapted (layer, module) pairs merged
  int64_t replaced = 0;      // base tensors replaced (biases, modules_to_save)
  bool untied_head = false;  // a tied base's head written as a tensor of its own (adapter_unties_head)
  DType dtype = DType::F32;
  double scaling = 0;
};

// The base model to merge `adapter` into: `base` (config.json of `base_dir`) built with
// `options` and filled from base_dir's files. Untied when the adapter trains a tied model's
// head or token embedding (modules_to_save): PEFT's copies untie them, so merge_and_unload's
// model has a head of its own, which starts as the base's embedding (then the adapter's head
// replaces it, or it stays the base's while the embedding is replaced).
struct LoraAdapter;
bool adapter_unties_head(const LoraAdapter& adapter, const ModelConfig& base);
std::unique_ptr<Transformer> load_base_for_merge(const std::string& base_dir, const ModelConfig& base,
                                                 const LoraAdapter& adapter, const ModelOptions& options);

// The merge in memory: every adapted weight of `base` (f32 parameters on the host) gets
// scaling * B @ A, trained biases and modules_to_save replace the base's tensors. `adapter`
// was read for this base (load_lora_adapter); `adapter_dir` names it in errors. eval and
// generate --adapter run the merged model (model/inference_load.h).
LoraMergeSummary merge_lora_into(Transformer& base, const LoraAdapter& adapter, const std::string& adapter_dir,
                                 const std::function<void(const LoraMergeProgress&)>& on_layer = {});

// BadInput (exit 2) naming the file: an `out_dir` that is (or lies inside) `base_dir` or
// `adapter_dir` (links and ".." resolved; checked before anything is read), a base that is
// not an HF model directory, an adapter whose shapes or targets do not fit it
// (model/lora_adapter.h: also a base tensor its config does not declare it trains), a
// replaced tensor the base does not have or of another shape.
LoraMergeSummary merge_lora(const std::string& base_dir, const std::string& adapter_dir, const std::string& out_dir,
                            const LoraMergeOptions& options = {});

}  // namespace zt::model
