// Small model configs shared by tests that need a real model but no particular shape.
#pragma once
#include "model/config.h"

namespace zt::testing {

// tiny-llama cut to 2 layers of width 32 (4 query heads, 2 kv heads of dim 8, ffn 40) and
// a 70-token vocabulary (padded to 128 rows): GQA, RoPE and vocab padding, all small.
inline model::ModelConfig small_llama_config() {
  model::ModelConfig c = model::preset_config("tiny-llama");
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope.head_dim = 8;
  c.intermediate_size = 40;
  c.vocab_size = 70;
  return c;
}

// A 2-layer model of width 32 of either family (GPT-2: 4 heads, ffn 128; Llama: 4 query and
// 2 kv heads, ffn 72), a 300-token vocabulary (padded to 384 rows), 64 positions.
inline model::ModelConfig micro_config(model::Family family) {
  const bool gpt2 = family == model::Family::GPT2;
  model::ModelConfig c = model::preset_config(gpt2 ? "tiny-gpt2" : "tiny-llama");
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.num_kv_heads = gpt2 ? 4 : 2;
  c.head_dim = 8;
  c.rope.head_dim = 8;
  c.intermediate_size = gpt2 ? 128 : 72;
  c.vocab_size = 300;
  c.max_position_embeddings = 64;
  return c;
}

}  // namespace zt::testing
