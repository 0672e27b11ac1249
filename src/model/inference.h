// Inference with a KV cache over a model's parameter registry (every family).
//
// The engine reads the same ParameterRegistry and ModelConfig as the training
// Transformer (the parameters are used in place, never copied, in their stored dtype), and
// runs the training model's own block function (model/block.h) with a KV cache and a start
// position: the same packed GEMMs, norms and RoPE table (incl. llama3 scaling); only the
// attention step differs (ops/decode_attention.h against the cache). Learned positions are
// the rows wpe[start .. start+Tn).
//
// Device: the engine runs where the registry's parameters are (CPU or CUDA), with f32
// activations and KV cache; parameters f32, or on the CPU also bf16 (read in place).
//
//   engine.forward(prompt)        prefill: positions 0 .. P-1, caches their keys/values
//   engine.forward(next_token)    decode: position P, then P+1, ...
//
// Logits of a token at position t equal Transformer::forward_logits of the whole
// sequence at t (up to f32 rounding). The registry must outlive the engine and keep its
// buffers; the engine holds no gradients and never writes parameters.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/registry.h"

namespace zt::model {

class Transformer;

enum class LogitsFor { LastToken, AllTokens };

struct InferenceOptions {
  int64_t batch_size = 1;
  // Cache capacity in tokens; 0: the model's max_position_embeddings. A smaller cache
  // saves memory (2 * layers * Hkv * D floats per token and sequence).
  int64_t max_seq_len = 0;
};

class InferenceEngine {
 public:
  InferenceEngine(const ModelConfig& config, const ParameterRegistry& registry, InferenceOptions options = {});
  explicit InferenceEngine(const Transformer& model, InferenceOptions options = {});
  ~InferenceEngine();
  InferenceEngine(const InferenceEngine&) = delete;
  InferenceEngine& operator=(const InferenceEngine&) = delete;

  const ModelConfig& config() const { return config_; }
  int64_t batch_size() const { return options_.batch_size; }
  int64_t capacity() const { return options_.max_seq_len; }
  // Tokens cached so far per sequence = the position of the next token.
  int64_t position() const { return position_; }
  int64_t remaining() const { return capacity() - position_; }

  // Empties the cache (the next token is at position 0).
  void reset() { position_ = 0; }
  // Forgets cached positions >= n (n <= position()).
  void truncate(int64_t n);

  // tokens: i32 [B, Tn] at positions position() .. position()+Tn-1 (Tn >= 1, fitting in
  // remaining()). logits: f32 [B, V] for LastToken, [B, Tn, V] for AllTokens (V is the
  // unpadded vocab_size). Appends the tokens to the cache.
  void forward(const Tensor& tokens, const Tensor& logits, LogitsFor which = LogitsFor::LastToken);
  // Batch size 1: runs `tokens` and returns the logits [V] of the last one.
  std::vector<float> forward(const std::vector<int32_t>& tokens);

 private:
  struct Scratch;
  void ensure_scratch(int64_t rows);

  ModelConfig config_;
  const ParameterRegistry& registry_;
  InferenceOptions options_;
  Device device_;
  int64_t position_ = 0;
  std::vector<OwnedTensor> k_cache_, v_cache_;  // per layer [B, Hkv, S, D]
  ops::RopeTable rope_;                         // Rotary: capacity rows
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace zt::model
