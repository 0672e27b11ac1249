#include "model/config.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt::model {
namespace {

using nlohmann::json;

// Typed field access with errors that name the file and key.
template <class T>
T get_or(const json& j, const char* key, T fallback, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    ZT_THROW_INPUT(source, ": key '", key, "' has the wrong type (", it->type_name(), ")");
  }
}

// eos_token_id: an integer, or a list (HF keeps lists; the first is the one a sampler
// stops on first, the others still end a generation).
void read_eos(const json& j, ModelConfig& c, int64_t fallback, const std::string& source) {
  const auto it = j.find("eos_token_id");
  c.eos_token_id_list.clear();
  if (it == j.end() || !it->is_array()) {
    c.eos_token_id = get_or<int64_t>(j, "eos_token_id", fallback, source);
    return;
  }
  for (const json& id : *it) {
    if (!id.is_number_integer())
      ZT_THROW_INPUT(source, ": key 'eos_token_id' must be an integer or a list of integers");
    c.eos_token_id_list.push_back(id.get<int64_t>());
  }
  c.eos_token_id = c.eos_token_id_list.empty() ? -1 : c.eos_token_id_list.front();
  if (c.eos_token_id_list.size() < 2) c.eos_token_id_list.clear();  // one id: the scalar says it
}

// What config.json says back: the list when there was one.
json eos_json(const ModelConfig& c) {
  return c.eos_token_id_list.empty() ? json(c.eos_token_id) : json(c.eos_token_id_list);
}

template <class T>
T require(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) ZT_THROW_INPUT(source, ": required key '", key, "' is missing");
  return get_or<T>(j, key, T{}, source);
}

ops::RopeScaling parse_rope_scaling(const json& s, const std::string& source, const char* key) {
  ops::RopeScaling out;
  if (s.is_null()) return out;
  if (!s.is_object()) ZT_THROW_INPUT(source, ": '", key, "' must be an object or null");
  std::string type = get_or<std::string>(s, "rope_type", get_or<std::string>(s, "type", "default", source), source);
  if (type == "default") return out;
  if (type == "llama3") {
    out.type = ops::RopeScaling::Type::Llama3;
    out.factor = get_or<float>(s, "factor", 8.0f, source);
    out.low_freq_factor = get_or<float>(s, "low_freq_factor", 1.0f, source);
    out.high_freq_factor = get_or<float>(s, "high_freq_factor", 4.0f, source);
    out.original_max_position_embeddings = get_or<int>(s, "original_max_position_embeddings", 8192, source);
    return out;
  }
  if (type == "linear") {
    out.type = ops::RopeScaling::Type::Linear;
    out.factor = get_or<float>(s, "factor", 1.0f, source);
    return out;
  }
  ZT_THROW_UNSUPPORTED(source, ": ", key, ".rope_type '", type,
                       "' is not supported (supported: default, linear, llama3)");
}

ModelConfig gpt2_from_json(const json& j, const std::string& source) {
  ModelConfig c;
  set_family(c, Family::GPT2);
  c.model_type = "gpt2";
  c.vocab_size = get_or<int64_t>(j, "vocab_size", 50257, source);
  c.max_position_embeddings = get_or<int64_t>(j, "n_positions", 1024, source);
  c.hidden_size = get_or<int64_t>(j, "n_embd", 768, source);
  c.num_layers = get_or<int64_t>(j, "n_layer", 12, source);
  c.num_heads = get_or<int64_t>(j, "n_head", 12, source);
  c.num_kv_heads = c.num_heads;
  // 4 * n_embd only when that cannot overflow (validate names an out-of-range n_embd).
  c.intermediate_size = get_or<int64_t>(
      j, "n_inner", c.hidden_size > 0 && c.hidden_size <= kMaxModelWidth ? 4 * c.hidden_size : 1, source);
  c.norm_eps = get_or<float>(j, "layer_norm_epsilon", 1e-5f, source);
  c.initializer_range = get_or<float>(j, "initializer_range", 0.02f, source);
  c.embd_pdrop = get_or<float>(j, "embd_pdrop", 0.1f, source);
  c.resid_pdrop = get_or<float>(j, "resid_pdrop", 0.1f, source);
  c.attn_pdrop = get_or<float>(j, "attn_pdrop", 0.1f, source);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", true, source);
  c.bos_token_id = get_or<int64_t>(j, "bos_token_id", 50256, source);
  read_eos(j, c, 50256, source);
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
  const std::string act = get_or<std::string>(j, "activation_function", "gelu_new", source);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    ZT_THROW_UNSUPPORTED(source, ": activation_function '", act,
                         "' is not supported for gpt2 (supported: gelu_new, gelu_pytorch_tanh)");
  if (get_or<bool>(j, "scale_attn_by_inverse_layer_idx", false, source))
    ZT_THROW_UNSUPPORTED(source, ": scale_attn_by_inverse_layer_idx=true is not supported");
  if (!get_or<bool>(j, "scale_attn_weights", true, source))
    ZT_THROW_UNSUPPORTED(source, ": scale_attn_weights=false is not supported");
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0)
    ZT_THROW_INPUT(source, ": n_embd (", c.hidden_size, ") must be a multiple of n_head (", c.num_heads, ")");
  c.head_dim = c.hidden_size / c.num_heads;
  return c;
}

ModelConfig llama_from_json(const json& j, const std::string& source, const std::string& type) {
  ModelConfig c;
  set_family(c, Family::Llama);
  c.model_type = type;
  c.vocab_size = require<int64_t>(j, "vocab_size", source);
  c.hidden_size = require<int64_t>(j, "hidden_size", source);
  c.intermediate_size = require<int64_t>(j, "intermediate_size", source);
  c.num_layers = require<int64_t>(j, "num_hidden_layers", source);
  c.num_heads = require<int64_t>(j, "num_attention_heads", source);
  c.num_kv_heads = get_or<int64_t>(j, "num_key_value_heads", c.num_heads, source);
  if (c.num_heads <= 0) ZT_THROW_INPUT(source, ": num_attention_heads must be positive");
  c.head_dim = get_or<int64_t>(j, "head_dim", c.hidden_size / c.num_heads, source);
  c.max_position_embeddings = get_or<int64_t>(j, "max_position_embeddings", 2048, source);
  c.norm_eps = get_or<float>(j, "rms_norm_eps", 1e-6f, source);
  c.initializer_range = get_or<float>(j, "initializer_range", 0.02f, source);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false, source);
  c.bos_token_id = get_or<int64_t>(j, "bos_token_id", -1, source);
  read_eos(j, c, -1, source);
  c.embd_pdrop = c.resid_pdrop = 0.0f;
  c.attn_pdrop = get_or<float>(j, "attention_dropout", 0.0f, source);
  const std::string act = get_or<std::string>(j, "hidden_act", "silu", source);
  if (act != "silu")
    ZT_THROW_UNSUPPORTED(source, ": hidden_act '", act, "' is not supported for ", type, " (supported: silu)");
  if (get_or<int64_t>(j, "pretraining_tp", 1, source) != 1)
    ZT_THROW_UNSUPPORTED(source, ": pretraining_tp != 1 is not supported");
  if (type == "qwen2") {
    c.qkv_bias = true;
    c.attn_out_bias = false;
    c.mlp_bias = false;
    if (get_or<bool>(j, "use_sliding_window", false, source))
      ZT_THROW_UNSUPPORTED(source, ": use_sliding_window=true is not supported (set it to false)");
  } else {
    c.qkv_bias = c.attn_out_bias = get_or<bool>(j, "attention_bias", false, source);
    c.mlp_bias = get_or<bool>(j, "mlp_bias", false, source);
  }
  if (type == "mistral") {
    const int64_t window = get_or<int64_t>(j, "sliding_window", 0, source);
    if (window > 0 && window < c.max_position_embeddings)
      ZT_THROW_UNSUPPORTED(source, ": sliding_window=", window, " (< max_position_embeddings ",
                           c.max_position_embeddings, ") is not supported; set it to null");
  }
  c.rope.head_dim = static_cast<int>(c.head_dim);
  // transformers 5.x nests theta and scaling in rope_parameters; 4.x has them at top level.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    c.rope.theta = get_or<float>(rp, "rope_theta", get_or<float>(j, "rope_theta", 10000.0f, source), source);
    c.rope.scaling = parse_rope_scaling(rp, source, "rope_parameters");
  } else {
    c.rope.theta = get_or<float>(j, "rope_theta", 10000.0f, source);
    if (j.contains("rope_scaling")) c.rope.scaling = parse_rope_scaling(j["rope_scaling"], source, "rope_scaling");
  }
  return c;
}

}  // namespace

void set_family(ModelConfig& c, Family family) {
  c.family = family;
  const bool gpt2 = family == Family::GPT2;
  c.norm = gpt2 ? NormKind::LayerNorm : NormKind::RmsNorm;
  c.mlp = gpt2 ? MlpKind::Gelu : MlpKind::GatedSilu;
  c.position = gpt2 ? PositionKind::Learned : PositionKind::Rotary;
  c.residual_init = gpt2 ? ResidualInit::DepthScaled : ResidualInit::Plain;
}

namespace {
template <class N>
N count_parameters(const ModelConfig& c) {
  const N C = static_cast<N>(c.hidden_size), L = static_cast<N>(c.num_layers), V = static_cast<N>(c.vocab_size);
  N n = V * C;  // wte
  if (c.position == PositionKind::Learned) n += static_cast<N>(c.max_position_embeddings) * C;
  N block = 0;
  const N norm = c.norm_has_bias() ? 2 * C : C;
  block += 2 * norm;
  const N qkv = static_cast<N>(c.qkv_width());
  block += C * qkv + (c.qkv_bias ? qkv : 0);
  block += static_cast<N>(c.num_heads) * static_cast<N>(c.head_dim) * C + (c.attn_out_bias ? C : 0);
  const N F = static_cast<N>(c.intermediate_size);
  const N mlp_in = static_cast<N>(c.mlp_in_width());
  block += mlp_in * C + F * C + (c.mlp_bias ? mlp_in + C : 0);
  n += L * block + norm;
  if (!c.tie_word_embeddings) n += V * C;
  return n;
}
}  // namespace

int64_t ModelConfig::num_parameters() const { return count_parameters<int64_t>(*this); }
double ModelConfig::num_parameters_f64() const { return count_parameters<double>(*this); }

double ModelConfig::flops_per_token(int64_t seq_len, BaseWeights base) const {
  // 6 FLOPs per parameter per token (forward + backward), embeddings excluded, plus the
  // attention score and value matmuls: 6 * L * T * (Hq * D) * 2 / 2 (causal half).
  // The embedding tables are lookups, not GEMMs; the head is one. A tied head shares the
  // token table's parameters, so its GEMM is added back; an untied head is already a
  // parameter of its own.
  const double n =
      static_cast<double>(num_parameters() - vocab_size * hidden_size -
                          (position == PositionKind::Learned ? max_position_embeddings * hidden_size : 0)) +
      (tie_word_embeddings ? static_cast<double>(vocab_size * hidden_size) : 0.0);
  const double attn = 6.0 * num_layers * seq_len * num_heads * head_dim;
  return (base == BaseWeights::Frozen ? 4.0 : 6.0) * n + attn;
}

void ModelConfig::validate(const std::string& source) const {
  // Every size is bounded before anything multiplies or allocates with it: a config.json
  // with absurd sizes (2^62 layers, a 2^40 vocabulary) is an error naming the key, never a
  // wrapped product, a bad_alloc or a hang. The bounds are far above any real model's.
  const bool gpt2 = family == Family::GPT2;
  auto in_range = [&](int64_t v, const char* key, const char* gpt2_key, int64_t max) {
    const char* name = gpt2 && gpt2_key != nullptr ? gpt2_key : key;
    if (v <= 0) ZT_THROW_INPUT(source, ": ", name, " must be positive (got ", v, ")");
    if (v > max)
      ZT_THROW_INPUT(source, ": ", name, " ", v, " is larger than zerotrain supports (at most ", max,
                     "); is the config.json damaged?");
  };
  in_range(vocab_size, "vocab_size", nullptr, kMaxVocabSize);
  in_range(hidden_size, "hidden_size", "n_embd", kMaxModelWidth);
  in_range(num_layers, "num_hidden_layers", "n_layer", kMaxModelLayers);
  in_range(num_heads, "num_attention_heads", "n_head", kMaxModelHeads);
  in_range(num_kv_heads, "num_key_value_heads", "n_head", kMaxModelHeads);
  in_range(head_dim, "head_dim", nullptr, kMaxModelWidth);
  in_range(intermediate_size, "intermediate_size", "n_inner", kMaxModelWidth);
  in_range(max_position_embeddings, "max_position_embeddings", "n_positions", kMaxModelPositions);
  // Each size fits its bound, so the count is exact in double; past the bound the int64
  // count (num_parameters) could wrap.
  if (num_parameters_f64() > kMaxModelParameters)
    ZT_THROW_INPUT(source, ": the sizes give ", num_parameters_f64(), " parameters, more than zerotrain supports (",
                   kMaxModelParameters, "); is the config.json damaged?");
  if (num_heads % num_kv_heads != 0)
    ZT_THROW_INPUT(source, ": num_attention_heads (", num_heads, ") must be a multiple of num_key_value_heads (",
                   num_kv_heads, ")");
  if (position == PositionKind::Rotary && head_dim % 2 != 0)
    ZT_THROW_INPUT(source, ": head_dim (", head_dim, ") must be even for rotary embeddings");
  for (float p : {embd_pdrop, resid_pdrop, attn_pdrop})
    if (!(p >= 0.0f && p < 1.0f)) ZT_THROW_INPUT(source, ": dropout probabilities must be in [0, 1)");
  // The norm divides by sqrt(variance + eps): a negative eps gives NaN for rows of small
  // variance (a zero one 1/0) from the first step on.
  if (!(std::isfinite(norm_eps) && norm_eps > 0.0f))
    ZT_THROW_INPUT(source, ": ", family == Family::GPT2 ? "layer_norm_epsilon" : "rms_norm_eps", " is ", norm_eps,
                   "; it must be a small positive number (HF's defaults: ", family == Family::GPT2 ? "1e-5" : "1e-6",
                   ")");
}

ModelConfig config_from_hf_json(const json& j, const std::string& source) {
  if (!j.is_object()) ZT_THROW_INPUT(source, ": expected a JSON object");
  const std::string type = get_or<std::string>(j, "model_type", "", source);
  ModelConfig c;
  if (type == "gpt2") {
    c = gpt2_from_json(j, source);
  } else if (type == "llama" || type == "mistral" || type == "qwen2") {
    c = llama_from_json(j, source, type);
  } else if (type.empty()) {
    ZT_THROW_INPUT(source, ": 'model_type' is missing (expected gpt2, llama, mistral or qwen2)");
  } else {
    ZT_THROW_UNSUPPORTED(source, ": model_type '", type, "' is not supported (supported: gpt2, llama, mistral, qwen2)");
  }
  c.validate(source);
  return c;
}

json config_to_hf_json(const ModelConfig& c) {
  json j;
  if (c.family == Family::GPT2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"activation_function", "gelu_new"},
         {"vocab_size", c.vocab_size},
         {"n_positions", c.max_position_embeddings},
         {"n_ctx", c.max_position_embeddings},
         {"n_embd", c.hidden_size},
         {"n_layer", c.num_layers},
         {"n_head", c.num_heads},
         {"n_inner", c.intermediate_size == 4 * c.hidden_size ? json(nullptr) : json(c.intermediate_size)},
         {"layer_norm_epsilon", c.norm_eps},
         {"initializer_range", c.initializer_range},
         {"embd_pdrop", c.embd_pdrop},
         {"resid_pdrop", c.resid_pdrop},
         {"attn_pdrop", c.attn_pdrop},
         {"tie_word_embeddings", c.tie_word_embeddings},
         {"scale_attn_weights", true},
         {"bos_token_id", c.bos_token_id},
         {"eos_token_id", eos_json(c)}};
  } else {
    const char* arch = c.model_type == "mistral" ? "MistralForCausalLM"
                       : c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                                 : "LlamaForCausalLM";
    j = {{"architectures", {arch}},
         {"model_type", c.model_type},
         {"hidden_act", "silu"},
         {"vocab_size", c.vocab_size},
         {"hidden_size", c.hidden_size},
         {"intermediate_size", c.intermediate_size},
         {"num_hidden_layers", c.num_layers},
         {"num_attention_heads", c.num_heads},
         {"num_key_value_heads", c.num_kv_heads},
         {"head_dim", c.head_dim},
         {"max_position_embeddings", c.max_position_embeddings},
         {"rms_norm_eps", c.norm_eps},
         {"initializer_range", c.initializer_range},
         {"tie_word_embeddings", c.tie_word_embeddings},
         {"attention_dropout", c.attn_pdrop},
         {"rope_theta", c.rope.theta}};
    if (c.model_type != "qwen2") {
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
    }
    if (c.model_type == "mistral") j["sliding_window"] = nullptr;
    const auto& s = c.rope.scaling;
    if (s.type == ops::RopeScaling::Type::Llama3) {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", s.factor},
                           {"low_freq_factor", s.low_freq_factor},
                           {"high_freq_factor", s.high_freq_factor},
                           {"original_max_position_embeddings", s.original_max_position_embeddings}};
    } else if (s.type == ops::RopeScaling::Type::Linear) {
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.factor}};
    } else {
      j["rope_scaling"] = nullptr;
    }
    if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_id >= 0) j["eos_token_id"] = eos_json(c);
  }
  j["torch_dtype"] = "float32";
  return j;
}

namespace {
ModelConfig gpt2_shape(int64_t layers, int64_t heads, int64_t width) {
  ModelConfig c;
  c.num_layers = layers;
  c.num_heads = c.num_kv_heads = heads;
  c.hidden_size = width;
  c.head_dim = width / heads;
  c.intermediate_size = 4 * width;
  c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.0f;
  c.bos_token_id = c.eos_token_id = 50256;  // <|endoftext|> of GPT-2's 50257-token vocabulary, as HF's gpt2
  return c;
}
}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny-gpt2", "tiny-llama", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-3.2-1b", "llama-2-7b"};
}

ModelConfig preset_config(const std::string& name) {
  ModelConfig c;
  if (name == "gpt2") {
    c = gpt2_shape(12, 12, 768);
  } else if (name == "gpt2-medium") {
    c = gpt2_shape(24, 16, 1024);
  } else if (name == "gpt2-large") {
    c = gpt2_shape(36, 20, 1280);
  } else if (name == "gpt2-xl") {
    c = gpt2_shape(48, 25, 1600);
  } else if (name == "tiny-gpt2") {
    // Small enough to train on 2 CPU cores in a minute; byte-level vocab of 256 + specials.
    c = gpt2_shape(4, 4, 128);
    c.vocab_size = 512;
    c.max_position_embeddings = 256;
    c.bos_token_id = c.eos_token_id = 0;
  } else if (name == "tiny-llama" || name == "llama-3.2-1b" || name == "llama-2-7b") {
    set_family(c, Family::Llama);
    c.model_type = "llama";
    c.qkv_bias = c.attn_out_bias = c.mlp_bias = false;
    c.tie_word_embeddings = true;
    c.norm_eps = 1e-5f;
    if (name == "llama-2-7b") {
      // meta-llama/Llama-2-7b-hf's config.json: MHA, untied head, no RoPE scaling.
      c.vocab_size = 32000;
      c.hidden_size = 4096;
      c.num_layers = 32;
      c.num_heads = 32;
      c.num_kv_heads = 32;
      c.intermediate_size = 11008;
      c.max_position_embeddings = 4096;
      c.tie_word_embeddings = false;
      c.rope.theta = 10000.0f;
      c.bos_token_id = 1;
      c.eos_token_id = 2;
    } else if (name == "tiny-llama") {
      c.vocab_size = 512;
      c.hidden_size = 128;
      c.num_layers = 4;
      c.num_heads = 4;
      c.num_kv_heads = 2;
      c.intermediate_size = 344;
      c.max_position_embeddings = 256;
      c.rope.theta = 10000.0f;
      c.bos_token_id = c.eos_token_id = 0;
    } else {
      c.vocab_size = 128256;
      c.hidden_size = 2048;
      c.num_layers = 16;
      c.num_heads = 32;
      c.num_kv_heads = 8;
      c.intermediate_size = 8192;
      c.max_position_embeddings = 131072;
      c.rope.theta = 500000.0f;
      c.rope.scaling.type = ops::RopeScaling::Type::Llama3;
      c.rope.scaling.factor = 32.0f;
      c.rope.scaling.low_freq_factor = 1.0f;
      c.rope.scaling.high_freq_factor = 4.0f;
      c.rope.scaling.original_max_position_embeddings = 8192;
      c.bos_token_id = 128000;
      c.eos_token_id = 128001;
    }
    c.head_dim = c.hidden_size / c.num_heads;
    c.rope.head_dim = static_cast<int>(c.head_dim);
  } else {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    ZT_THROW_INPUT("unknown model preset '", name, "' (built-in presets: ", names, ")");
  }
  c.validate("preset " + name);
  return c;
}

}  // namespace zt::model
