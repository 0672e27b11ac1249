// Rotary position embedding as HF Llama applies it ("rotate_half": element i pairs with
// i + D/2), with rope_theta and the Llama-3 frequency scaling.
#pragma once
#include <string>

#include "core/tensor.h"

namespace zt::ops {

struct RopeScaling {
  enum class Type { None, Llama3, Linear } type = Type::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

struct RopeConfig {
  int head_dim = 64;
  float theta = 10000.0f;
  RopeScaling scaling;
};

// The inverse frequencies (D/2 values), after scaling, in f64 then rounded to f32 as
// transformers computes them.
std::vector<float> rope_inv_freq(const RopeConfig& config);

// cos/sin tables [max_positions, D/2] (f32, host or device as `device`). A CUDA table holds
// the host table's values (computed on the host, copied once), so both backends rotate by
// the same cos/sin bits.
struct RopeTable {
  OwnedTensor cos;
  OwnedTensor sin;
  int max_positions = 0;
  int head_dim = 0;
};
RopeTable make_rope_table(const RopeConfig& config, int max_positions, Device device = Device::cpu());

// qkv: [B, T, (Hq + 2 Hkv) * D] packed q heads, then k heads, then v heads.
// Rotates the Hq + Hkv heads of q and k in place by position t; v is untouched.
void rope_forward_inplace(const Tensor& qkv, int n_q_heads, int n_kv_heads, const RopeTable& table);
// The inverse rotation (the transpose), in place on the gradient of qkv.
void rope_backward_inplace(const Tensor& dqkv, int n_q_heads, int n_kv_heads, const RopeTable& table);

}  // namespace zt::ops
