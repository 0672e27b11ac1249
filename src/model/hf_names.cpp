// The HF name tables (see hf_names.h): transformers' GPT2LMHeadModel and LlamaForCausalLM
// (also Mistral and Qwen2, which share Llama's names).
#include "model/hf_names.h"

namespace zt::model {
namespace {

HfNameTable gpt2_table() {
  HfNameTable t;
  t.embed = {{Field::TokenEmbedding, {"transformer.wte.weight"}},
             {Field::PositionEmbedding, {"transformer.wpe.weight"}}};
  const std::string b = "transformer.h.{L}.";
  t.block = {{Field::Norm1Weight, {b + "ln_1.weight"}},          {Field::Norm1Bias, {b + "ln_1.bias"}},
             {Field::QkvWeight, {b + "attn.c_attn.weight"}},     {Field::QkvBias, {b + "attn.c_attn.bias"}},
             {Field::AttnOutWeight, {b + "attn.c_proj.weight"}}, {Field::AttnOutBias, {b + "attn.c_proj.bias"}},
             {Field::Norm2Weight, {b + "ln_2.weight"}},          {Field::Norm2Bias, {b + "ln_2.bias"}},
             {Field::MlpInWeight, {b + "mlp.c_fc.weight"}},      {Field::MlpInBias, {b + "mlp.c_fc.bias"}},
             {Field::MlpOutWeight, {b + "mlp.c_proj.weight"}},   {Field::MlpOutBias, {b + "mlp.c_proj.bias"}}};
  t.head = {{Field::FinalNormWeight, {"transformer.ln_f.weight"}},
            {Field::FinalNormBias, {"transformer.ln_f.bias"}},
            {Field::LmHead, {"lm_head.weight"}}};
  t.linear_layout = WeightLayout::InOut;  // Conv1D: [in, out]
  t.skipped_suffixes = {".attn.bias", ".attn.masked_bias"};
  t.legacy_prefix = "transformer.";
  t.layers_key = "n_layer";
  t.block_prefix = b;
  return t;
}

HfNameTable llama_table() {
  HfNameTable t;
  t.embed = {{Field::TokenEmbedding, {"model.embed_tokens.weight"}}};
  const std::string b = "model.layers.{L}.", a = b + "self_attn.", m = b + "mlp.";
  t.block = {{Field::Norm1Weight, {b + "input_layernorm.weight"}},
             {Field::QkvWeight, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}},
             {Field::QkvBias, {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}},
             {Field::AttnOutWeight, {a + "o_proj.weight"}},
             {Field::AttnOutBias, {a + "o_proj.bias"}},
             {Field::Norm2Weight, {b + "post_attention_layernorm.weight"}},
             {Field::MlpInWeight, {m + "gate_proj.weight", m + "up_proj.weight"}},
             {Field::MlpOutWeight, {m + "down_proj.weight"}},
             {Field::MlpInBias, {m + "gate_proj.bias", m + "up_proj.bias"}},
             {Field::MlpOutBias, {m + "down_proj.bias"}}};
  t.head = {{Field::FinalNormWeight, {"model.norm.weight"}}, {Field::LmHead, {"lm_head.weight"}}};
  t.skipped_suffixes = {".rotary_emb.inv_freq"};
  t.layers_key = "num_hidden_layers";
  t.block_prefix = b;
  return t;
}

}  // namespace

const HfNameTable& hf_name_table(Family family) {
  static const HfNameTable gpt2 = gpt2_table();
  static const HfNameTable llama = llama_table();
  return family == Family::GPT2 ? gpt2 : llama;
}

std::string hf_block_prefix(const HfNameTable& table, int64_t layer) {
  std::string prefix = table.block_prefix;
  const size_t at = prefix.find("{L}");
  if (at != std::string::npos) prefix.replace(at, 3, std::to_string(layer));
  return prefix;
}

const char* family_name(Family family) { return family == Family::GPT2 ? "gpt2" : "llama"; }

}  // namespace zt::model
