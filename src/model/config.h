// Model configuration, in the fields HF config.json uses. One struct covers the GPT-2
// family (GPT2LMHeadModel) and the Llama family (LlamaForCausalLM, and the Mistral and
// Qwen2 configs that share its structure).
//
// The model code reads only the architecture flags (norm, MLP, positions, biases, tied
// head, residual init); `family` says which HF names and config.json format the model
// has (model/hf_names.h) and is read by the HF readers and writers only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/rope.h"

namespace zt::model {

// Bounds of a model's sizes (ModelConfig::validate): far above any real model's (vocabularies
// of ~256k, widths of ~30k, ~130 layers, contexts of ~1M), small enough that every product
// of two sizes fits int64 and token ids fit int32.
inline constexpr int64_t kMaxVocabSize = (int64_t{1} << 31) - 1;
inline constexpr int64_t kMaxModelWidth = int64_t{1} << 24;
inline constexpr int64_t kMaxModelLayers = int64_t{1} << 16;
inline constexpr int64_t kMaxModelHeads = int64_t{1} << 16;
inline constexpr int64_t kMaxModelPositions = int64_t{1} << 24;
inline constexpr double kMaxModelParameters = 1e14;

enum class Family { GPT2, Llama };  // the HF naming and config.json format

enum class NormKind { LayerNorm, RmsNorm };      // LayerNorm has a bias, RMSNorm none
enum class MlpKind { Gelu, GatedSilu };          // fc -> gelu_new -> proj; silu(gate) * up -> down
enum class PositionKind { Learned, Rotary };     // a wpe table added to the embedding; RoPE on q, k
enum class ResidualInit { Plain, DepthScaled };  // DepthScaled: residual projections get std / sqrt(2 L)

// Whether a run trains the base model's weights or keeps them frozen (LoRA).
enum class BaseWeights { Trained, Frozen };

struct ModelConfig {
  Family family = Family::GPT2;
  std::string model_type = "gpt2";  // as written in config.json: gpt2, llama, mistral, qwen2
  // Architecture (defaults: GPT-2's); set_family() sets a family's.
  NormKind norm = NormKind::LayerNorm;
  MlpKind mlp = MlpKind::Gelu;
  PositionKind position = PositionKind::Learned;
  ResidualInit residual_init = ResidualInit::DepthScaled;
  int64_t vocab_size = 50257;
  int64_t hidden_size = 768;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t num_kv_heads = 12;
  int64_t head_dim = 64;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 1024;
  float norm_eps = 1e-5f;
  bool tie_word_embeddings = true;
  bool qkv_bias = true;       // GPT-2: yes; Llama: attention_bias; Qwen2: yes
  bool attn_out_bias = true;  // GPT-2: yes; Llama: attention_bias; Qwen2: no
  bool mlp_bias = true;       // GPT-2: yes; Llama: mlp_bias
  ops::RopeConfig rope;       // PositionKind::Rotary only
  float initializer_range = 0.02f;
  float embd_pdrop = 0.0f;
  float resid_pdrop = 0.0f;
  float attn_pdrop = 0.0f;  // not applied: the fused attention has no probability dropout
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;  // the first when config.json gives a list
  // config.json's eos_token_id when it is a list (Llama-3-Instruct ends turns with
  // <|eot_id|> too): written back as the list HF reads. Empty: the scalar above.
  std::vector<int64_t> eos_token_id_list;

  // Vocabulary rounded up to a multiple of 128: embedding and head matrices have this
  // many rows; rows past vocab_size are zero and excluded from the softmax.
  int64_t padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }
  int64_t qkv_width() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
  // Rows of the MLP's input projection: F, or 2F for [gate; up].
  int64_t mlp_in_width() const { return mlp == MlpKind::GatedSilu ? 2 * intermediate_size : intermediate_size; }
  bool norm_has_bias() const { return norm == NormKind::LayerNorm; }
  // Parameters as HF counts them (no vocab padding, tied head counted once).
  int64_t num_parameters() const;
  // The same count in floating point: never overflows, so a config with absurd sizes can be
  // measured (and refused) before anything is allocated.
  double num_parameters_f64() const;
  // Training FLOPs per token (6N + attention), as llm.c and PaLM count them, for MFU.
  // A frozen base (LoRA) computes no weight gradients: 4N (forward and input gradients)
  // + attention (whose backward is the same); the adapters' 6 per parameter are the
  // caller's to add.
  double flops_per_token(int64_t seq_len, BaseWeights base = BaseWeights::Trained) const;
  // Throws BadInput naming the field when the config is inconsistent.
  void validate(const std::string& source) const;
};

// Sets `family` and that family's architecture flags (GPT-2: LayerNorm, GELU MLP, learned
// positions, depth-scaled init; Llama: RMSNorm, gated SiLU MLP, RoPE, plain init). Biases
// and the tied head are per model and stay as they are.
void set_family(ModelConfig& config, Family family);

// Reads a HF config.json object (transformers 4.x `rope_theta`/`rope_scaling` and 5.x
// `rope_parameters`). `source` names the file in errors. Unsupported model types or
// features (e.g. Mistral's sliding_window shorter than the context) are BadInput errors.
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& source);
// Writes config.json as transformers writes it for this model type.
nlohmann::json config_to_hf_json(const ModelConfig& config);

// Built-in shapes: tiny-gpt2, tiny-llama (tests and the default run), gpt2, gpt2-medium,
// gpt2-large, gpt2-xl, llama-3.2-1b (benchmarks). Throws BadInput listing the names.
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace zt::model
