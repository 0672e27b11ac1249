// Rotary position embedding: frequencies and tables as HF transformers computes them, and
// the Tensor-level wrappers.
//
// Accumulation rule: rope_forward_inplace rotates activations in place;
// rope_backward_inplace overwrites the activation gradient (=) with the inverse rotation.
// RoPE has no parameters. qkv is f32 (on CUDA also bf16). Tables are always computed on
// the host; a CUDA table is that host table copied to the device, so both backends rotate
// by the same cos/sin bits.
#include "ops/rope.h"

#include <cmath>

#include "backend/rope_kernels.h"
#include "backend/cuda_api.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace zt::ops {
namespace {

// transformers does these steps as separate float32 tensor ops; keep the compiler from
// fusing them into FMAs so the roundings match.
#if defined(__GNUC__) && !defined(__clang__)
#define ZT_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define ZT_NO_FP_CONTRACT
#endif

ZT_NO_FP_CONTRACT std::vector<float> default_inv_freq(int dim, float theta) {
  // inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)):
  // the exponent is an f32 division, pow is f32 (computed here in f64 and rounded, i.e.
  // correctly rounded), the reciprocal is f32.
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float p = static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(exponent)));
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }
  return inv;
}

// transformers' _compute_llama3_parameters, step by step in f32 like the torch ops
// (scalar / tensor is tensor.reciprocal() * scalar in torch).
ZT_NO_FP_CONTRACT void apply_llama3(std::vector<float>& inv, const RopeScaling& s) {
  const float factor = s.factor;
  const float low_freq_factor = s.low_freq_factor;
  const float high_freq_factor = s.high_freq_factor;
  const double old_context_len = s.original_max_position_embeddings;
  const float low_freq_wavelen = static_cast<float>(old_context_len / static_cast<double>(low_freq_factor));
  const float high_freq_wavelen = static_cast<float>(old_context_len / static_cast<double>(high_freq_factor));
  const float two_pi = static_cast<float>(2.0 * M_PI);
  const float old_ctx_f = static_cast<float>(old_context_len);
  const float freq_span =
      static_cast<float>(static_cast<double>(high_freq_factor) - static_cast<double>(low_freq_factor));
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    float llama = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = ((1.0f / wavelen) * old_ctx_f - low_freq_factor) / freq_span;
    const float a = (1.0f - smooth) * llama;
    const float smoothed = a / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) llama = smoothed;
    f = llama;
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const RopeConfig& config) {
  ZT_CHECK(config.head_dim > 0 && config.head_dim % 2 == 0, "rope: head_dim must be positive and even, got ",
           config.head_dim);
  ZT_CHECK(config.theta > 0.0f, "rope: theta must be positive, got ", config.theta);
  std::vector<float> inv = default_inv_freq(config.head_dim, config.theta);
  const RopeScaling& s = config.scaling;
  switch (s.type) {
    case RopeScaling::Type::None:
      break;
    case RopeScaling::Type::Linear:
      ZT_CHECK(s.factor > 0.0f, "rope linear scaling: factor must be positive, got ", s.factor);
      for (float& f : inv) f = f / s.factor;
      break;
    case RopeScaling::Type::Llama3:
      ZT_CHECK(s.factor > 0.0f, "rope llama3 scaling: factor must be positive, got ", s.factor);
      ZT_CHECK(s.low_freq_factor > 0.0f && s.high_freq_factor > s.low_freq_factor,
               "rope llama3 scaling: need 0 < low_freq_factor < high_freq_factor, got ", s.low_freq_factor, ", ",
               s.high_freq_factor);
      ZT_CHECK(s.original_max_position_embeddings > 0,
               "rope llama3 scaling: original_max_position_embeddings must be positive");
      apply_llama3(inv, s);
      break;
  }
  return inv;
}

RopeTable make_rope_table(const RopeConfig& config, int max_positions, Device device) {
  ZT_CHECK(max_positions > 0, "make_rope_table: max_positions must be positive, got ", max_positions);
  if (!device.is_cpu() && !device.is_cuda()) no_kernel("make_rope_table", device);
  const std::vector<float> inv = rope_inv_freq(config);
  const int64_t half = config.head_dim / 2;
  RopeTable table;
  table.cos = OwnedTensor({max_positions, half}, DType::F32, Device::cpu(), "rope_cos");
  table.sin = OwnedTensor({max_positions, half}, DType::F32, Device::cpu(), "rope_sin");
  table.max_positions = max_positions;
  table.head_dim = config.head_dim;
  float* c = table.cos.data<float>();
  float* s = table.sin.data<float>();
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      // freqs = inv_freq @ position (one f32 product); cos/sin of that f32 angle.
      const float angle = static_cast<float>(p) * inv[static_cast<size_t>(i)];
      c[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  if (device.is_cpu()) return table;
  // A device table: the host values, copied once (a synchronous copy; tables are made once
  // per model or run).
  RopeTable on_device;
  on_device.cos = OwnedTensor({max_positions, half}, DType::F32, device, "rope_cos");
  on_device.sin = OwnedTensor({max_positions, half}, DType::F32, device, "rope_sin");
  on_device.max_positions = table.max_positions;
  on_device.head_dim = table.head_dim;
  cuda::copy_to_device(on_device.cos->data(), table.cos->data(), table.cos->nbytes());
  cuda::copy_to_device(on_device.sin->data(), table.sin->data(), table.sin->nbytes());
  return on_device;
}

namespace {

void check_rope_args(const char* op, const Tensor& qkv, int n_q_heads, int n_kv_heads, const RopeTable& table) {
  ZT_CHECK(qkv.defined() && qkv.dim() == 3, op, ": qkv must be [B, T, (Hq + 2 Hkv) * D], got ", shape_str(qkv.shape()));
  ZT_CHECK(is_activation_dtype(qkv), op, ": qkv must be f32 (or, on CUDA, bf16/f16), got ", dtype_name(qkv.dtype()));
  ZT_CHECK(qkv.is_contiguous(), op, ": qkv must be contiguous");
  ZT_CHECK(n_q_heads > 0 && n_kv_heads > 0, op, ": head counts must be positive");
  ZT_CHECK(table.head_dim > 0 && table.head_dim % 2 == 0, op, ": bad rope table head_dim ", table.head_dim);
  ZT_CHECK(qkv.size(2) == static_cast<int64_t>(n_q_heads + 2 * n_kv_heads) * table.head_dim, op, ": qkv last dim ",
           qkv.size(2), " != (Hq + 2 Hkv) * D = (", n_q_heads, " + 2*", n_kv_heads, ") * ", table.head_dim);
  ZT_CHECK(qkv.size(1) <= table.max_positions, op, ": sequence length ", qkv.size(1), " exceeds the rope table's ",
           table.max_positions, " positions");
  ZT_CHECK(table.cos->dtype() == DType::F32 && table.sin->dtype() == DType::F32, op, ": rope table must be f32");
}

}  // namespace

void rope_forward_inplace(const Tensor& qkv, int n_q_heads, int n_kv_heads, const RopeTable& table) {
  check_rope_args("rope_forward_inplace", qkv, n_q_heads, n_kv_heads, table);
  const Device dev = common_device("rope_forward_inplace", {&qkv, &table.cos.view(), &table.sin.view()});
  ZT_RUN_KERNEL("rope_forward_inplace", dev, rope_forward_inplace(qkv, n_q_heads, n_kv_heads, table.cos, table.sin, 0));
}

void rope_backward_inplace(const Tensor& dqkv, int n_q_heads, int n_kv_heads, const RopeTable& table) {
  check_rope_args("rope_backward_inplace", dqkv, n_q_heads, n_kv_heads, table);
  const Device dev = common_device("rope_backward_inplace", {&dqkv, &table.cos.view(), &table.sin.view()});
  ZT_RUN_KERNEL("rope_backward_inplace", dev,
                rope_backward_inplace(dqkv, n_q_heads, n_kv_heads, table.cos, table.sin, 0));
}

}  // namespace zt::ops
