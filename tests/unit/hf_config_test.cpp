// config.json parsing as the hub ships it: Llama-3 in transformers 4.x (rope_theta +
// rope_scaling) and 5.x (rope_parameters), Mistral with sliding_window null vs set, Qwen2,
// GPT-2; unsupported types and features name the key; our writer's output reads back.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/hf_dir.h"
#include "model/hf_weights.h"

using namespace zt;
using namespace zt::model;
using nlohmann::json;

namespace {

// meta-llama/Llama-3.2-1B config.json (transformers 4.45).
json llama32_4x() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// The same model as transformers 5.x writes it: theta and scaling in rope_parameters.
json llama32_5x() {
  json j = llama32_4x();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"rope_type", "llama3"},  {"rope_theta", 500000.0},
                          {"factor", 32.0},         {"high_freq_factor", 4.0},
                          {"low_freq_factor", 1.0}, {"original_max_position_embeddings", 8192}};
  j["transformers_version"] = "5.0.0";
  return j;
}

// mistralai/Mistral-7B-v0.3.
json mistral_v03() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 32768})");
}

// Qwen/Qwen2.5-0.5B.
json qwen25() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}

// openai-community/gpt2.
json gpt2() {
  return json::parse(R"({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_inner": null, "n_layer": 12, "n_positions": 1024, "reorder_and_upcast_attn": false,
    "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true,
    "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
    "summary_type": "cls_index", "summary_use_proj": true,
    "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
    "vocab_size": 50257})");
}

void expect_llama32(const ModelConfig& c) {
  EXPECT_EQ(c.family, Family::Llama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.attn_out_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_id, 128001);
  EXPECT_EQ(c.rope.theta, 500000.0f);
  EXPECT_EQ(c.rope.head_dim, 64);
  EXPECT_EQ(c.rope.scaling.type, ops::RopeScaling::Type::Llama3);
  EXPECT_EQ(c.rope.scaling.factor, 32.0f);
  EXPECT_EQ(c.rope.scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope.scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope.scaling.original_max_position_embeddings, 8192);
  // 1.24 B parameters, as the hub reports for Llama-3.2-1B (tied head counted once).
  EXPECT_EQ(c.num_parameters(), 1235814400);
}

template <class F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << needles.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << e.what() << "' lacks '" << n << "'";
  }
}

ModelConfig parse(const json& j) { return config_from_hf_json(j, "model/config.json"); }

}  // namespace

TEST(HfConfig, Llama3Transformers4x) { expect_llama32(parse(llama32_4x())); }

TEST(HfConfig, Llama3Transformers5xRopeParameters) { expect_llama32(parse(llama32_5x())); }

TEST(HfConfig, Llama2StyleDefaultsAndLinearScaling) {
  json j = llama32_4x();
  j.erase("head_dim");
  j.erase("rope_scaling");
  j.erase("num_key_value_heads");
  j["rope_theta"] = 10000.0;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 2048 / 32);
  EXPECT_EQ(c.num_kv_heads, 32);  // absent: multi-head attention
  EXPECT_EQ(c.rope.scaling.type, ops::RopeScaling::Type::None);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // the older "type" key
  c = parse(j);
  EXPECT_EQ(c.rope.scaling.type, ops::RopeScaling::Type::Linear);
  EXPECT_EQ(c.rope.scaling.factor, 2.0f);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope.scaling.type, ops::RopeScaling::Type::None);
  j["eos_token_id"] = {128001, 128008, 128009};  // instruct models list several
  EXPECT_EQ(parse(j).eos_token_id, 128001);
}

TEST(HfConfig, MistralSlidingWindowNullVsSet) {
  ModelConfig c = parse(mistral_v03());
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.theta, 1000000.0f);
  // v0.1 had a 4096-token window under a 32768 context: attention would differ.
  json v01 = mistral_v03();
  v01["sliding_window"] = 4096;
  expect_error([&] { parse(v01); }, ErrorKind::Unsupported, {"model/config.json", "sliding_window=4096", "null"});
  // A window covering the whole context is plain causal attention.
  v01["sliding_window"] = 32768;
  EXPECT_EQ(parse(v01).max_position_embeddings, 32768);
}

TEST(HfConfig, Qwen2) {
  ModelConfig c = parse(qwen25());
  EXPECT_EQ(c.family, Family::Llama);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.attn_out_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.num_parameters(), 494032768);  // Qwen2.5-0.5B: 0.49 B
  json sw = qwen25();
  sw["use_sliding_window"] = true;
  expect_error([&] { parse(sw); }, ErrorKind::Unsupported, {"use_sliding_window"});
}

TEST(HfConfig, Gpt2) {
  ModelConfig c = parse(gpt2());
  EXPECT_EQ(c.family, Family::GPT2);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.intermediate_size, 3072);  // n_inner null: 4 * n_embd
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_FLOAT_EQ(c.embd_pdrop, 0.1f);
  EXPECT_EQ(c.num_parameters(), 124439808);  // the 124 M of GPT-2 small
  json j = gpt2();
  j["activation_function"] = "relu";
  expect_error([&] { parse(j); }, ErrorKind::Unsupported, {"activation_function 'relu'"});
  j = gpt2();
  j["scale_attn_by_inverse_layer_idx"] = true;
  expect_error([&] { parse(j); }, ErrorKind::Unsupported, {"scale_attn_by_inverse_layer_idx"});
  j = gpt2();
  j["n_head"] = 7;
  expect_error([&] { parse(j); }, ErrorKind::BadInput, {"n_embd (768) must be a multiple of n_head (7)"});
  // eos_token_id as a list (issue 19): kept, the first is the scalar, written back as the list.
  j = gpt2();
  j["eos_token_id"] = json::array({50256, 50255});
  c = parse(j);
  EXPECT_EQ(c.eos_token_id, 50256);
  EXPECT_EQ(c.eos_token_id_list, (std::vector<int64_t>{50256, 50255}));
  EXPECT_EQ(config_to_hf_json(c).at("eos_token_id"), json::array({50256, 50255}));
  j["eos_token_id"] = json::array({50256, "x"});
  expect_error([&] { parse(j); }, ErrorKind::BadInput, {"eos_token_id"});
}

TEST(HfConfig, UnsupportedAndMalformed) {
  expect_error([] { parse(json::parse(R"({"model_type": "bert"})")); }, ErrorKind::Unsupported,
               {"model/config.json", "model_type 'bert'", "gpt2, llama, mistral, qwen2"});
  expect_error([] { parse(json::parse(R"({"vocab_size": 3})")); }, ErrorKind::BadInput, {"'model_type' is missing"});
  expect_error([] { parse(json::array()); }, ErrorKind::BadInput, {"JSON object"});
  json j = llama32_4x();
  j["hidden_act"] = "gelu";
  expect_error([&] { parse(j); }, ErrorKind::Unsupported, {"hidden_act 'gelu'"});
  j = llama32_4x();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error([&] { parse(j); }, ErrorKind::Unsupported, {"rope_type 'yarn'"});
  j = llama32_5x();
  j["rope_parameters"]["rope_type"] = "dynamic";
  expect_error([&] { parse(j); }, ErrorKind::Unsupported, {"rope_parameters", "'dynamic'"});
  j = llama32_4x();
  j.erase("hidden_size");
  expect_error([&] { parse(j); }, ErrorKind::BadInput, {"'hidden_size' is missing"});
  j = llama32_4x();
  j["num_hidden_layers"] = "16";
  expect_error([&] { parse(j); }, ErrorKind::BadInput, {"'num_hidden_layers'", "wrong type"});
  j = llama32_4x();
  j["num_key_value_heads"] = 5;
  expect_error([&] { parse(j); }, ErrorKind::BadInput, {"multiple of num_key_value_heads"});
  j = llama32_4x();
  j["pretraining_tp"] = 2;
  expect_error([&] { parse(j); }, ErrorKind::Unsupported, {"pretraining_tp"});
}

TEST(HfConfig, WrittenConfigsReadBack) {
  for (const json& src : {llama32_4x(), llama32_5x(), mistral_v03(), qwen25(), gpt2()}) {
    const ModelConfig a = parse(src);
    SCOPED_TRACE(a.model_type);
    const json written = config_to_hf_json(a);
    const ModelConfig b = parse(written);
    EXPECT_EQ(b.model_type, a.model_type);
    EXPECT_EQ(b.vocab_size, a.vocab_size);
    EXPECT_EQ(b.hidden_size, a.hidden_size);
    EXPECT_EQ(b.intermediate_size, a.intermediate_size);
    EXPECT_EQ(b.num_layers, a.num_layers);
    EXPECT_EQ(b.num_heads, a.num_heads);
    EXPECT_EQ(b.num_kv_heads, a.num_kv_heads);
    EXPECT_EQ(b.head_dim, a.head_dim);
    EXPECT_EQ(b.max_position_embeddings, a.max_position_embeddings);
    EXPECT_EQ(b.norm_eps, a.norm_eps);
    EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings);
    EXPECT_EQ(b.qkv_bias, a.qkv_bias);
    EXPECT_EQ(b.attn_out_bias, a.attn_out_bias);
    EXPECT_EQ(b.mlp_bias, a.mlp_bias);
    EXPECT_EQ(b.rope.theta, a.rope.theta);
    EXPECT_EQ(b.rope.scaling.type, a.rope.scaling.type);
    EXPECT_EQ(b.rope.scaling.factor, a.rope.scaling.factor);
    EXPECT_EQ(b.bos_token_id, a.bos_token_id);
    EXPECT_EQ(b.eos_token_id, a.eos_token_id);
    EXPECT_EQ(b.num_parameters(), a.num_parameters());
    EXPECT_EQ(written["architectures"][0].get<std::string>(), a.model_type == "gpt2"      ? "GPT2LMHeadModel"
                                                              : a.model_type == "mistral" ? "MistralForCausalLM"
                                                              : a.model_type == "qwen2"   ? "Qwen2ForCausalLM"
                                                                                          : "LlamaForCausalLM");
  }
}

// Issue 40: a config.json with absurd sizes reached arithmetic and allocation (a wrapped
// parameter count, bad_alloc); every size is bounded first, with an error naming the key
// as the file spells it.
TEST(HfConfig, AbsurdSizesAreBadInputNamingTheKey) {
  const int64_t huge = int64_t{3} << 60;  // a multiple of the heads, so the size itself is refused
  for (const char* key : {"hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
                          "max_position_embeddings", "num_attention_heads"}) {
    json j = llama32_4x();
    j[key] = huge;
    if (std::string(key) == "num_attention_heads") j["num_key_value_heads"] = huge;
    expect_error([&] { parse(j); }, ErrorKind::BadInput, {key, "larger than zerotrain supports"});
  }
  for (const char* key : {"n_embd", "n_layer", "n_positions", "n_inner"}) {
    json j = gpt2();
    j[key] = huge;
    expect_error([&] { parse(j); }, ErrorKind::BadInput, {key, "larger than zerotrain supports"});
  }
  // Each size within its bound, but together more parameters than supported.
  json j = llama32_4x();
  j["num_hidden_layers"] = 60000;
  j["hidden_size"] = 1 << 20;
  j["head_dim"] = 1 << 15;
  j["intermediate_size"] = 1 << 22;
  expect_error([&] { parse(j); }, ErrorKind::BadInput, {"parameters, more than zerotrain supports"});
}

// Issue 40: /dev/null (a device) given as model.config or as the model was reported as
// "no such file": it is named as what it is.
TEST(HfConfig, ADeviceIsNamedAsNotARegularFile) {
  expect_error([] { load_hf_config_file("/dev/null"); }, ErrorKind::BadInput, {"/dev/null", "not a regular file"});
  expect_error([] { hf_weight_files("/dev/null"); }, ErrorKind::BadInput, {"/dev/null", "not a regular file"});
  expect_error([] { load_hf_config_file("/nonexistent.json"); }, ErrorKind::BadInput, {"no such file"});
}
