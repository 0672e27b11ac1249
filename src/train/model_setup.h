// Builds the model and tokenizer a run trains: a built-in preset (random init) or an HF
// directory (config.json + safetensors), with the tokenizer from the run config, the
// model directory, or — for a preset without one — a byte-level BPE trained on the
// training text (the built-in run does this).
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "io/tokenizer.h"
#include "model/lora_config.h"
#include "model/transformer.h"
#include "config/config.h"

namespace zt::train {

struct ModelSetup {
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<io::Tokenizer> tokenizer;
  std::string tokenizer_path;  // file copied next to the final model ("" for none)
  // A fine-tuned HF directory's generation_config.json, carried to the final model ("": none).
  std::string generation_config;
  // ZeRO-3: the model was built without parameter storage; the engine gets each rank's
  // slice of each unit from this (reading only those bytes of an HF directory's files, or
  // initialising a preset's unit and cutting the slice). Empty: the model is complete.
  std::function<void(model::Unit&, int64_t, const Tensor&)> fill_slice;
  // A LoRA run (config.lora): its settings, for final/'s adapter_config.json, which names
  // the base (base_model_name_or_path: model.path, or the preset / config.json's name).
  std::optional<model::LoraConfig> lora;
  std::string base_model;
};

// The dtype parameters (and the final model files) are stored in for a precision.
DType storage_dtype(config::Precision p);

ModelSetup setup_model(const config::TrainConfig& config, const std::filesystem::path& output_dir);

// The shape of a model trained from scratch: a built-in preset's, or an HF config.json's
// (model.config). BadInput when the section names neither (an HF directory is loaded
// with its weights instead).
model::ModelConfig from_scratch_config(const config::ModelSection& model);

// Writes the HF directory (config.json, generation_config.json, safetensors, tokenizer); for
// a LoRA run, the PEFT adapter folder (adapter_config.json, adapter_model.safetensors,
// tokenizer) as PeftModel.save_pretrained and the Trainer write it.
void save_final_model(const model::Transformer& model, const ModelSetup& setup, const std::string& dir, DType dtype);

}  // namespace zt::train
