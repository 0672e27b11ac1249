// Where a GPU training step spends its time: each op of a transformer block (forward and
// backward) timed alone at one model shape, bf16 activations and parameters, plus the
// LM head + cross-entropy and AdamW over a block's parameters. Prints ms per call and the
// share of the summed step estimate, so kernel work can be aimed (bench/NOTES.md).
//   gpu_op_bench [--preset gpt2] [--batch 16] [--seq 1024] [--reps 10] [--fp16]
// --fp16: f16 activations and parameters instead of bf16 (the same ops, to compare kernel by
// kernel where an fp16 step loses time against bf16)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "model/config.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/optimizer.h"

using namespace zt;

namespace {

struct Row {
  std::string name;
  double ms;
  int per_layer;  // calls per layer in a step (0: once per step)
};

double time_ms(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: allocations, cuBLASLt heuristics
  cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

OwnedTensor device(Shape s, DType dt) {
  OwnedTensor t(std::move(s), dt, Device::cuda());
  t->zero();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "gpt2";
  int64_t B = 16, T = 1024;
  int reps = 10;
  DType activation_dtype = DType::BF16;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--preset")
      preset = next();
    else if (a == "--batch")
      B = std::atoll(next().c_str());
    else if (a == "--seq")
      T = std::atoll(next().c_str());
    else if (a == "--reps")
      reps = std::atoi(next().c_str());
    else if (a == "--fp16")
      activation_dtype = DType::F16;
    else {
      std::fprintf(stderr, "usage: gpu_op_bench [--preset NAME] [--batch B] [--seq T] [--reps N] [--fp16]\n");
      return 2;
    }
  }
  try {
    if (!cuda::available()) {
      std::fprintf(stderr, "gpu_op_bench: no GPU visible\n");
      return 1;
    }
    cuda::init(0);
    const model::ModelConfig c = model::preset_config(preset);
    const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
    const int Hq = static_cast<int>(c.num_heads), Hkv = static_cast<int>(c.num_kv_heads);
    const int64_t QKV = c.qkv_width(), HD = Hq * D;
    const int64_t Vp = (c.vocab_size + 127) / 128 * 128;
    const DType bf = activation_dtype;

    auto x = device({N, C}, bf), y = device({N, C}, bf), dx = device({N, C}, bf);
    auto mean = device({N}, DType::F32), rstd = device({N}, DType::F32);
    auto gain = device({C}, bf), bias = device({C}, bf), dgain = device({C}, bf), dbias = device({C}, bf);
    auto qkv = device({B, T, QKV}, bf), dqkv = device({B, T, QKV}, bf);
    auto att = device({B, T, HD}, bf), datt = device({B, T, HD}, bf);
    auto lse = device({B, static_cast<int64_t>(Hq), T}, DType::F32);
    auto w_qkv = device({QKV, C}, bf), dw_qkv = device({QKV, C}, bf);
    auto w_fc = device({F, C}, bf), dw_fc = device({F, C}, bf), w_down = device({C, F}, bf),
         dw_down = device({C, F}, bf);
    auto h = device({N, F}, bf), dh = device({N, F}, bf);
    auto w_head = device({Vp, C}, bf), dw_head = device({Vp, C}, bf);
    OwnedTensor targets({N}, DType::I32);
    for (int64_t i = 0; i < N; ++i) targets.data<int32_t>()[i] = static_cast<int32_t>(i % c.vocab_size);
    OwnedTensor d_targets(targets->shape(), DType::I32, Device::cuda());
    cuda::copy_to_device(d_targets->data(), targets->data(), targets->nbytes());
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const WeightLayout L = WeightLayout::OutIn;

    std::vector<Row> rows;
    auto add = [&](const char* name, int per_layer, const std::function<void()>& fn) {
      rows.push_back({name, time_ms(fn, reps), per_layer});
    };
    add("layernorm fwd", 2, [&] { ops::layernorm_forward(y, mean, rstd, x, gain, bias, 1e-5f); });
    add("layernorm bwd", 2, [&] { ops::layernorm_backward(dx, dgain, dbias, y, x, gain, mean, rstd); });
    add("qkv linear fwd", 1, [&] { ops::linear_forward(qkv->reshape({N, QKV}), x, w_qkv, Tensor(), L); });
    add("qkv linear bwd", 1, [&] { ops::linear_backward(dx, dw_qkv, Tensor(), dqkv->reshape({N, QKV}), x, w_qkv, L); });
    add("attention fwd", 1, [&] { ops::attention_forward(att, lse, qkv, Hq, Hkv, scale); });
    add("attention bwd", 1, [&] { ops::attention_backward(dqkv, datt, qkv, att, lse, Hq, Hkv, scale); });
    add("mlp up linear fwd", 1, [&] { ops::linear_forward(h, x, w_fc, Tensor(), L); });
    add("mlp up linear bwd", 1, [&] { ops::linear_backward(dx, dw_fc, Tensor(), dh, x, w_fc, L); });
    add("gelu fwd", 1, [&] { ops::gelu_forward(h, h); });
    add("gelu bwd", 1, [&] { ops::gelu_backward(dh, dh, h); });
    add("mlp down linear fwd", 1, [&] { ops::linear_forward(y, h, w_down, Tensor(), L); });
    add("mlp down linear bwd", 1, [&] { ops::linear_backward(dh, dw_down, Tensor(), dx, h, w_down, L); });
    add("residual add", 2, [&] { ops::add(y, y, x); });
    add("lm head + CE fwd+bwd", 0, [&] {
      ops::lm_head_cross_entropy_forward_backward(dx, dw_head, x, w_head, d_targets, c.vocab_size, -100,
                                                  1.0f / static_cast<float>(N));
    });
    {
      // AdamW over one block's worth of parameters (12 C^2), bf16 with an f32 master.
      const int64_t n = 12 * C * C;
      auto p = device({n}, bf), g = device({n}, bf), master = device({n}, DType::F32), m = device({n}, DType::F32),
           v = device({n}, DType::F32);
      AdamWHyper hy;
      hy.lr = 1e-4f;
      hy.step = 1;
      add("adamw (one block)", 1, [&] { ops::adamw_step(p, master, g, m, v, hy); });
    }

    double total = 0;
    for (const Row& r : rows) total += r.ms * (r.per_layer ? r.per_layer * c.num_layers : 1);
    std::printf("%s B=%lld T=%lld %s, %d layers; ms per call, and per step (calls x layers)\n", preset.c_str(),
                static_cast<long long>(B), static_cast<long long>(T), bf == DType::F16 ? "fp16" : "bf16",
                static_cast<int>(c.num_layers));
    std::printf("%-24s %10s %10s %7s\n", "op", "ms/call", "ms/step", "share");
    for (const Row& r : rows) {
      const double step = r.ms * (r.per_layer ? r.per_layer * c.num_layers : 1);
      std::printf("%-24s %10.3f %10.2f %6.1f%%\n", r.name.c_str(), r.ms, step, 100.0 * step / total);
    }
    std::printf("%-24s %10s %10.2f\n", "sum", "", total);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "gpu_op_bench: %s\n", e.what());
    return e.exit_code();
  }
}
