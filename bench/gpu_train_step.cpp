// One training step on the GPU (forward, backward, AdamW), bf16 parameters and
// activations, random-init weights and random tokens: tokens/s, MFU against a bf16 GEMM
// peak measured in the same process, and peak device memory. bench/gpu_train_bench.sh
// runs it next to PyTorch (bench/torch_gpu_step.py) and prints the ratios.
//   gpu_train_step --preset gpt2|gpt2-xl|llama-3.2-1b --batch 16 --seq 1024 --steps 20 [--f32]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "model/transformer.h"
#include "ops/linear.h"
#include "zero/optimizer.h"

using namespace zt;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Dense bf16 GEMM throughput (FLOP/s) through the same matmul path the model uses.
double measure_gemm_peak() {
  const int64_t n = 8192;
  OwnedTensor a({n, n}, DType::BF16, Device::cuda()), w({n, n}, DType::BF16, Device::cuda()),
      out({n, n}, DType::BF16, Device::cuda());
  a->zero();
  w->zero();
  for (int i = 0; i < 3; ++i) ops::linear_forward(out, a, w, Tensor(), WeightLayout::OutIn);
  cuda::synchronize();
  const int reps = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) ops::linear_forward(out, a, w, Tensor(), WeightLayout::OutIn);
  cuda::synchronize();
  return 2.0 * static_cast<double>(n) * n * n * reps / seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "gpt2";
  int64_t B = 16, T = 1024, steps = 20;
  bool f32 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--preset") preset = next();
    else if (a == "--batch") B = std::atoll(next().c_str());
    else if (a == "--seq") T = std::atoll(next().c_str());
    else if (a == "--steps") steps = std::atoll(next().c_str());
    else if (a == "--f32") f32 = true;
    else {
      std::fprintf(stderr, "usage: gpu_train_step --preset NAME --batch B --seq T --steps N [--f32]\n");
      return 2;
    }
  }
  try {
    if (!cuda::available()) {
      std::fprintf(stderr, "gpu_train_step: no GPU visible\n");
      return 1;
    }
    cuda::init(0);
    const double peak = measure_gemm_peak();
    model::ModelConfig config = model::preset_config(preset);
    config.embd_pdrop = config.resid_pdrop = config.attn_pdrop = 0.0f;
    model::ModelOptions mo;
    mo.device = Device::cuda();
    mo.param_dtype = mo.grad_dtype = f32 ? DType::F32 : DType::BF16;
    mo.activation_dtype = f32 ? DType::F32 : DType::BF16;
    model::Transformer model(config, mo);
    model.init_weights(1);
    zero::OptimizerSpec os;
    os.lr = 1e-4f;
    os.weight_decay = 0.1f;
    auto optimizer = zero::make_optimizer(model.registry(), os);

    OwnedTensor tok({B, T}, DType::I32), tgt({B, T}, DType::I32);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < B * T; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      tok.data<int32_t>()[i] = static_cast<int32_t>(x % static_cast<uint64_t>(config.vocab_size));
      tgt.data<int32_t>()[i] = static_cast<int32_t>((x >> 20) % static_cast<uint64_t>(config.vocab_size));
    }
    auto step = [&]() {
      model.zero_grads();
      const auto r = model.forward_backward(tok, tgt, 1.0f / static_cast<float>(B * T));
      optimizer->step(os.lr, 1.0f);
      return r.loss_sum / static_cast<double>(r.count);
    };
    double loss = step();  // warm-up: allocations, cuBLASLt heuristics
    loss = step();
    cuda::synchronize();
    cuda::reset_peak_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) loss = step();
    cuda::synchronize();
    const double secs = seconds_since(t0);
    const double tokens_per_s = static_cast<double>(B * T * steps) / secs;
    const double flops = config.flops_per_token(T) * tokens_per_s;
    std::printf("zerotrain %s %s B=%lld T=%lld: %.0f tokens/s, %.1f ms/step, MFU %.1f%% of measured bf16 GEMM "
                "%.0f TFLOP/s, peak memory %.2f GiB, loss %.4f\n",
                preset.c_str(), f32 ? "f32" : "bf16", static_cast<long long>(B), static_cast<long long>(T),
                tokens_per_s, 1000.0 * secs / static_cast<double>(steps), 100.0 * flops / peak, peak / 1e12,
                static_cast<double>(cuda::peak_bytes()) / (1024.0 * 1024.0 * 1024.0), loss);
    std::printf("RESULT zerotrain tokens_per_s=%.0f peak_gib=%.3f gemm_tflops=%.1f\n", tokens_per_s,
                static_cast<double>(cuda::peak_bytes()) / (1024.0 * 1024.0 * 1024.0), peak / 1e12);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "gpu_train_step: %s\n", e.what());
    return e.exit_code();
  }
}
