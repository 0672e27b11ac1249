// Hugging Face model directories, as `from_pretrained` / `save_pretrained` use them:
//
//   config.json                 model_type gpt2 | llama | mistral | qwen2 (model/config.h)
//   generation_config.json      bos/eos token ids
//   model.safetensors           or, above max_shard_size,
//   model-00001-of-0000N.safetensors ... + model.safetensors.index.json
//                               {"metadata": {"total_size": bytes, ...}, "weight_map": {name: file}}
//   tokenizer files             when given: tokenizer.json | vocab.json + merges.txt |
//                               tokenizer.model, with tokenizer_config.json and
//                               special_tokens_map.json (model/hf_tokenizer_files.h)
//
// Shards are cut as transformers cuts them: parameters in model order, a new shard when
// the next tensor would push the current one past max_shard_size (a tensor larger than
// the limit gets a shard of its own). The directory is written atomically (io/staging_dir.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/transformer.h"

namespace zt::model {

// transformers' default max_shard_size ("5GB", decimal as huggingface_hub counts).
constexpr uint64_t kDefaultMaxShardSize = 5'000'000'000ull;

// "5GB", "500MB", "2GiB", "1000" (bytes) -> bytes. Throws BadInput naming `what`.
uint64_t parse_byte_size(const std::string& text, const std::string& what);

// Reads and validates dir/config.json (Unsupported for model types and features zerotrain
// does not implement, naming which).
ModelConfig load_hf_config(const std::string& dir);
// The same for a config.json file on its own (a model trained from scratch in that shape:
// run config `model: {config: FILE}`, as transformers' AutoModelForCausalLM.from_config).
ModelConfig load_hf_config_file(const std::string& path);

struct Pretrained {
  ModelConfig config;
  std::unique_ptr<Transformer> model;
};

// config.json + weights -> a Transformer with every parameter filled (host; the weights
// are converted to options.param_dtype).
Pretrained load_pretrained(const std::string& dir, ModelOptions options = {});

struct SavePretrainedOptions {
  DType dtype = DType::F32;  // f32, bf16 or f16 in the files
  uint64_t max_shard_size = kDefaultMaxShardSize;
  // Tokenizers to save with the model: each a tokenizer file (tokenizer.json or any
  // other name, vocab.json with merges.txt beside it, a .model) or a directory holding one.
  // Their files go in under HF's names with a tokenizer_config.json + special_tokens_map.json
  // (carried over from the source when it has them, else written: model/hf_tokenizer_files.h).
  std::vector<std::string> tokenizer_files;
  // A source model's generation_config.json, copied as it is (save_pretrained keeps the
  // model's own: its sampling defaults, its eos ids); "": one is written from the config.
  std::string generation_config;
};

// Writes the model directory: every file, tokenizer included, goes into one staging
// directory that replaces `dir` atomically. An existing `dir` is replaced, keeping files
// that are not part of a model save (README.md, training notes); stale weight shards are
// removed, and so are the old tokenizer files when this save writes a tokenizer (a
// tokenizer.json of another tokenizer must not survive beside the new one).
void save_pretrained(const Transformer& model, const std::string& dir, const SavePretrainedOptions& options);
inline void save_pretrained(const Transformer& model, const std::string& dir, DType dtype,
                            uint64_t max_shard_size = kDefaultMaxShardSize) {
  SavePretrainedOptions o;
  o.dtype = dtype;
  o.max_shard_size = max_shard_size;
  save_pretrained(model, dir, o);
}

// The shard file names for n shards: model.safetensors for 1, else model-0000k-of-0000n.
std::string shard_file_name(int index, int count);

}  // namespace zt::model
