#include "train/model_setup.h"

#include <fstream>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "core/log.h"
#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/document_source.h"
#include "io/safetensors.h"
#include "model/hf_dir.h"
#include "model/hf_check.h"
#include "model/hf_weights.h"
#include "model/lora_adapter.h"
#include "ops/copy.h"
#include "train/tokenizer_texts.h"
#include "train/lora_setup.h"

namespace zt::train {
namespace fs = std::filesystem;

namespace {

// LoRA: every adapter unit of a model that holds its parameters gets its starting values.
void fill_adapter_units(model::Transformer& m, uint64_t seed, const model::LoraAdapter* adapter,
                        const std::string& base_path = "") {
  for (auto& u : m.registry().units())
    if (model::is_lora_unit(*u)) fill_adapter_unit(m, *u, seed, adapter, base_path);
}

}  // namespace

DType storage_dtype(config::Precision p) {
  switch (p) {
    case config::Precision::BF16:
      return DType::BF16;
    case config::Precision::F16:
      return DType::F16;
    case config::Precision::F32:
      return DType::F32;
  }
  return DType::F32;
}

model::ModelConfig from_scratch_config(const config::ModelSection& m) {
  if (!m.config_file.empty()) return model::load_hf_config_file(m.config_file);
  if (m.preset.empty())
    ZT_THROW_INPUT("model: give a built-in preset (model.preset), an HF config.json (model.config) or an HF directory "
                   "(model.path)");
  return model::preset_config(m.preset);
}

ModelSetup setup_model(const config::TrainConfig& c, const fs::path& out) {
  ModelSetup s;
  model::ModelOptions mo;
  mo.param_dtype = storage_dtype(c.precision);
  mo.grad_dtype = mo.param_dtype;
  mo.shard_count = c.world_size;
  // ZeRO 2-3 never hold a whole gradient: the engine gives each unit a gradient buffer
  // only while its backward runs.
  mo.allocate_grads = c.zero.stage < 2;
  mo.checkpointing = c.model.activation_checkpointing ? model::Checkpointing::EveryBlock : model::Checkpointing::None;
  mo.device = c.device == "cuda" ? Device::cuda(cuda::current_device()) : Device::cpu();
  // 16-bit runs on the GPU keep activations in the parameters' dtype as well (as PyTorch
  // autocast and DeepSpeed's fp16/bf16 engines do): every kernel then runs its 16-bit
  // tensor-core path. fp16 gradients stay representable through the loss scale.
  if (mo.device.is_cuda() && c.precision != config::Precision::F32) mo.activation_dtype = mo.param_dtype;

  // LoRA: the adapters resolved against the model's shape, and --adapter's tensors.
  std::shared_ptr<const model::LoraAdapter> adapter;
  const auto add_lora = [&](const model::ModelConfig& config) {
    if (!c.lora) return;
    mo.lora = model::lora_model_options(*c.lora, config, c.lora_source);
    if (!c.adapter.empty()) adapter = std::make_shared<model::LoraAdapter>(model::load_lora_adapter(c.adapter, config));
    s.lora = c.lora;
    s.base_model = !c.model.path.empty() ? c.model.path : !c.model.preset.empty() ? c.model.preset : c.model.config_file;
  };
  const uint64_t seed = c.seed;

  if (!c.model.path.empty()) {
    if (c.zero.stage >= 3) {
      // Each rank reads only its slice of each unit from the files.
      const model::ModelConfig config = model::load_hf_config(c.model.path);
      model::check_hf_config_against_weights(config, c.model.path + "/config.json", c.model.path);
      add_lora(config);
      mo.allocate_params = false;
      s.model = std::make_unique<model::Transformer>(config, mo);
      model::Transformer* m = s.model.get();
      const std::string path = c.model.path;
      s.fill_slice = [m, path, seed, adapter](model::Unit& u, int64_t begin, const Tensor& out) {
        if (model::is_lora_unit(u)) {  // built whole (small), then cut
          fill_adapter_unit(*m, u, seed, adapter.get(), path);
          ops::copy(out, u.flat_params().narrow(0, begin, out.numel()));
          return;
        }
        if (out.device().is_cpu()) {
          model::load_hf_unit_slice(m->config(), path, u, begin, out);
          return;
        }
        // The files are read on the host: a GPU slice is staged there, then copied.
        OwnedTensor host(out.shape(), out.dtype());
        model::load_hf_unit_slice(m->config(), path, u, begin, host);
        ops::copy(out, host);
      };
    } else if (mo.device.is_cpu()) {
      if (c.lora) add_lora(model::load_hf_config(c.model.path));
      model::Pretrained p = model::load_pretrained(c.model.path, mo);
      s.model = std::move(p.model);
      fill_adapter_units(*s.model, seed, adapter.get(), c.model.path);
    } else {
      // The files are read into a host model, which is then copied to the GPU unit by unit.
      if (c.lora) add_lora(model::load_hf_config(c.model.path));
      const model::Pretrained p = model::load_pretrained(c.model.path, model::host_staging_options(mo));
      fill_adapter_units(*p.model, seed, adapter.get(), c.model.path);
      s.model = std::make_unique<model::Transformer>(p.config, mo);
      for (size_t i = 0; i < p.model->registry().size(); ++i)
        ops::copy(s.model->registry().unit(i).flat_params(), p.model->registry().unit(i).flat_params());
    }
    const std::string gen = (fs::path(c.model.path) / "generation_config.json").string();
    std::error_code gen_ec;
    if (fs::is_regular_file(gen, gen_ec)) s.generation_config = gen;
    const std::string tok = c.model.tokenizer.empty() ? c.model.path : c.model.tokenizer;
    s.tokenizer = io::load_tokenizer(tok);
    s.tokenizer_path = tok;
    return s;
  }
  model::ModelConfig config = from_scratch_config(c.model);
  if (!c.model.tokenizer.empty()) {
    s.tokenizer = io::load_tokenizer(c.model.tokenizer);
    s.tokenizer_path = c.model.tokenizer;
  } else {
    // A preset has no vocabulary of its own: train a byte-level BPE of its size on the
    // training text (kept in the output directory and shipped with the final model).
    const std::vector<std::string> texts = tokenizer_training_texts(c);
    if (texts.empty())
      ZT_THROW_INPUT(c.source, ": ", c.model.preset.empty() ? "model.config '" + c.model.config_file : "model.preset '" + c.model.preset,
                     "' needs a tokenizer: set model.tokenizer, or give text data to train one on");
    io::BpeTrainOptions bo;
    bo.vocab_size = config.vocab_size;
    const std::string json = io::train_bpe_tokenizer_json(texts, bo);
    const std::string path = (out / "tokenizer.json").string();
    io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(json.data(), 1, json.size(), f); });
    s.tokenizer = io::load_tokenizer(path);
    s.tokenizer_path = path;
    ZT_INFO("trained a byte-level BPE tokenizer with ", s.tokenizer->vocab_size(), " tokens on ", texts.size(),
            " document(s): ", path);
  }
  if (s.tokenizer->vocab_size() > config.vocab_size)
    ZT_THROW_INPUT("the tokenizer has ", s.tokenizer->vocab_size(), " tokens but the model's vocabulary is ",
                   config.vocab_size, ": use a model with a larger vocab_size");
  // config.json names the tokenizer's BOS / EOS: a preset's ids are placeholders for the
  // vocabulary it is trained with (the gpt2 preset with GPT-2's vocab.json says 50256, as
  // HF's gpt2 does; tiny-llama with Llama-2's tokenizer.model 1 and 2). An HF config.json
  // keeps its own, filled in only where it has none.
  const bool preset = c.model.config_file.empty();
  if (s.tokenizer->bos_id() >= 0 && (preset || config.bos_token_id < 0)) config.bos_token_id = s.tokenizer->bos_id();
  if (s.tokenizer->eos_id() >= 0 && (preset || config.eos_token_id < 0)) {
    config.eos_token_id = s.tokenizer->eos_id();
    config.eos_token_id_list.clear();
  }
  add_lora(config);
  mo.allocate_params = c.zero.stage < 3;
  s.model = std::make_unique<model::Transformer>(config, mo);
  if (c.zero.stage < 3) {
    s.model->init_weights(c.seed);
    if (adapter) fill_adapter_units(*s.model, seed, adapter.get());
  } else {
    model::Transformer* m = s.model.get();
    s.fill_slice = [m, seed, adapter](model::Unit& u, int64_t begin, const Tensor& out) {
      if (model::is_lora_unit(u) && adapter && !u.has_params()) fill_adapter_unit(*m, u, seed, adapter.get());
      m->init_unit_slice(u, seed, begin, out);
    };
  }
  return s;
}

void save_final_model(const model::Transformer& model, const ModelSetup& setup, const std::string& dir, DType dtype) {
  if (setup.lora) {
    model::LoraConfig lc = *setup.lora;
    if (lc.base_model_name_or_path.empty()) lc.base_model_name_or_path = setup.base_model;
    std::vector<std::string> tokenizer_files;
    if (!setup.tokenizer_path.empty()) tokenizer_files.push_back(setup.tokenizer_path);
    model::save_lora_adapter(model.registry(), model.config(), lc, dir, tokenizer_files);
    return;
  }
  model::SavePretrainedOptions o;
  o.dtype = dtype;
  o.generation_config = setup.generation_config;
  // The tokenizer's files go in under HF's names (a my_tok.json as tokenizer.json), with a
  // tokenizer_config.json; in the same staging directory as the weights, so final/ is one
  // whole model at every instant.
  if (!setup.tokenizer_path.empty()) o.tokenizer_files.push_back(setup.tokenizer_path);
  model::save_pretrained(model, dir, o);
}

}  // namespace zt::train
