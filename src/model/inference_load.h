// Loading a HF model directory for inference (generate, eval): config.json, the weights,
// and the ids that end a generation (generation_config.json's eos_token_id, an int or a
// list, and config.json's).
//
// This is a small reader of its own until model/hf_dir.h's load_pretrained is available
// to build on; it allocates no gradient buffers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/transformer.h"

namespace zt::model {

struct InferenceModel {
  ModelConfig config;
  std::unique_ptr<Transformer> model;  // eval mode, no gradient buffers
  std::vector<int32_t> eos_token_ids;  // may be empty
};

// `dir` holds config.json and model.safetensors (or a sharded index). Errors name the
// file and the fix (BadInput). The weights are read on the host; for a GPU `device` (its
// backend initialised) the model is then copied there, unit by unit (eval and generate run
// there).
// `adapter_dir` ("" = none): a PEFT LoRA adapter folder for this base (eval / generate
// --adapter), merged into the weights on the host in f32 (model/lora_merge.h) before the
// model goes to `param_dtype` and `device`; BadInput naming the adapter when it does not fit.
InferenceModel load_for_inference(const std::string& dir, DType param_dtype = DType::F32,
                                  Device device = Device::cpu(), const std::string& adapter_dir = "");

// --model and --adapter as eval and generate take them. A PEFT adapter folder given as
// --model (adapter_config.json, no config.json) is the adapter, on the base its
// base_model_name_or_path names (BadInput when that is no local HF directory: give
// --model BASE --adapter DIR).
struct ModelAndAdapter {
  std::string model, adapter;
  // Where the tokenizer is read from without --tokenizer: the adapter folder when it has
  // one (a LoRA run's final/ does), else the model directory.
  std::string tokenizer;
};
ModelAndAdapter resolve_model_and_adapter(const std::string& model, const std::string& adapter);

// A copy of `source` (every unit's parameters in place: a ZeRO-3 model gathered) for
// inference: parameters in `param_dtype` on `device`, eval mode, no gradient buffers. The
// training run's end-of-run samples use it to turn a 16-bit GPU model into the f32 one
// the GPU inference engine runs, in device memory, without reading the saved files.
std::unique_ptr<Transformer> inference_copy(const Transformer& source, DType param_dtype, Device device);

}  // namespace zt::model
