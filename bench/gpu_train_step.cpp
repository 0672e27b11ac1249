// One training step on the GPU (forward, backward, AdamW), bf16 parameters and
// activations, random-init weights and random tokens: tokens/s, MFU against a bf16 GEMM
// peak measured in the same process, and peak device memory. bench/gpu_train_bench.sh
// runs it next to PyTorch (bench/torch_gpu_step.py) and prints the ratios. After the
// timed steps, --profile N more steps (default 2) with CUDA events at every unit boundary
// print where the step's GPU time goes (embedding, blocks, head, optimizer, ...).
//   gpu_train_step --preset gpt2|gpt2-xl|llama-3.2-1b --batch 16 --seq 1024 --steps 20 [--f32|--fp16]
//                  [--profile N] [--no-master]
// --fp16: f16 parameters, activations and gradients with f32 master weights, the loss scaled
// by 2^16 and the update unscaled (zerotrain train's fp16 recipe at a static scale)
// --no-master: the optimizer keeps no f32 master weights and its moments in bf16
// (zero::MasterWeights::None; PyTorch's pure-bf16 AdamW as bench/torch_gpu_step.py runs it:
// 8 bytes of model state per parameter instead of 16).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "model/transformer.h"
#include "train/gemm_peak.h"
#include "zero/optimizer.h"

using namespace zt;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Marks the compute stream at every unit boundary; an interval is named by the mark that
// starts it ("block fwd" runs from a block's before_forward to the next mark).
class ProfileHooks : public model::UnitHooks {
 public:
  ProfileHooks(cuda::Timeline& timeline, const model::ParameterRegistry& registry)
      : timeline_(timeline), registry_(registry) {}
  void before_forward(model::Unit& u) override { timeline_.mark(name(u) + " forward"); }
  void after_forward(model::Unit& u) override { timeline_.mark("after " + name(u) + " forward"); }
  void before_backward(model::Unit& u) override { timeline_.mark(name(u) + " backward"); }
  void after_backward(model::Unit& u) override { timeline_.mark("after " + name(u) + " backward"); }

 private:
  std::string name(const model::Unit& u) const {
    if (&u == registry_.units().front().get()) return "embedding";
    if (&u == registry_.units().back().get()) return "head";
    return "block";
  }
  cuda::Timeline& timeline_;
  const model::ParameterRegistry& registry_;
};

// Sums the intervals by label over the profiled steps and prints ms per step, largest first.
void print_profile(const std::vector<cuda::Timeline::Interval>& intervals, int64_t steps) {
  std::map<std::string, std::pair<double, int64_t>> by_label;
  double total = 0;
  for (const auto& i : intervals) {
    by_label[i.label].first += i.ms;
    by_label[i.label].second += 1;
    total += i.ms;
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(by_label.begin(), by_label.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::printf(
      "where a step's GPU time goes (CUDA events at unit boundaries, %lld steps; an interval is named by "
      "the mark that starts it)\n",
      static_cast<long long>(steps));
  std::printf("  %-36s %10s %8s %7s\n", "interval from", "ms/step", "count", "share");
  for (const auto& [label, v] : rows)
    std::printf("  %-36s %10.2f %8lld %6.1f%%\n", label.c_str(), v.first / static_cast<double>(steps),
                static_cast<long long>(v.second / steps), 100.0 * v.first / std::max(total, 1e-9));
  std::printf("  %-36s %10.2f\n", "step", total / static_cast<double>(steps));
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "gpt2";
  int64_t B = 16, T = 1024, steps = 20, profile_steps = 2;
  bool f32 = false, fp16 = false, no_master = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--preset")
      preset = next();
    else if (a == "--batch")
      B = std::atoll(next().c_str());
    else if (a == "--seq")
      T = std::atoll(next().c_str());
    else if (a == "--steps")
      steps = std::atoll(next().c_str());
    else if (a == "--f32")
      f32 = true;
    else if (a == "--fp16")
      fp16 = true;
    else if (a == "--profile")
      profile_steps = std::atoll(next().c_str());
    else if (a == "--no-master")
      no_master = true;
    else {
      std::fprintf(stderr,
                   "usage: gpu_train_step --preset NAME --batch B --seq T --steps N [--f32|--fp16] [--profile N] "
                   "[--no-master]\n");
      return 2;
    }
  }
  if (no_master && (f32 || fp16)) {
    std::fprintf(stderr, "gpu_train_step: --no-master needs bf16 parameters; drop --f32/--fp16\n");
    return 2;
  }
  if (f32 && fp16) {
    std::fprintf(stderr, "gpu_train_step: --f32 and --fp16 exclude each other\n");
    return 2;
  }
  const DType dtype = f32 ? DType::F32 : fp16 ? DType::F16 : DType::BF16;
  const char* dtype_label = f32 ? "f32" : fp16 ? "fp16" : "bf16";
  // fp16: a static loss scale of 2^16 (the dynamic scaler's start), unscaled in the update.
  const float loss_scale = fp16 ? 65536.0f : 1.0f;
  const char* recipe = no_master ? "bf16 parameters and moments, no master weights"
                       : f32     ? "f32 parameters and moments"
                       : fp16    ? "fp16 parameters, loss scale 2^16, f32 master weights and moments"
                                 : "bf16 parameters, f32 master weights and moments";
  try {
    if (!cuda::available()) {
      std::fprintf(stderr, "gpu_train_step: no GPU visible\n");
      return 1;
    }
    cuda::init(0);
    // Dense bf16 GEMM throughput on random data through the model's matmul path (PyTorch's
    // baseline measures the same shape on torch.randn data).
    const double peak = train::measure_gemm_flops(DType::BF16);
    model::ModelConfig config = model::preset_config(preset);
    config.embd_pdrop = config.resid_pdrop = config.attn_pdrop = 0.0f;
    model::ModelOptions mo;
    mo.device = Device::cuda();
    mo.param_dtype = mo.grad_dtype = dtype;
    mo.activation_dtype = dtype;
    model::Transformer model(config, mo);
    model.init_weights(1);
    zero::OptimizerSpec os;
    os.lr = 1e-4f;
    os.weight_decay = 0.1f;
    os.master_weights = no_master ? zero::MasterWeights::None : zero::MasterWeights::F32;
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
      const auto r = model.forward_backward(tok, tgt, loss_scale / static_cast<float>(B * T));
      optimizer->step(os.lr, 1.0f / loss_scale);
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
    std::printf(
        "zerotrain %s %s B=%lld T=%lld: %.0f tokens/s, %.1f ms/step, MFU %.1f%% of measured bf16 GEMM "
        "%.0f TFLOP/s, peak memory %.2f GiB, loss %.4f; recipe: %s (optimizer state %.2f GiB)\n",
        preset.c_str(), dtype_label, static_cast<long long>(B), static_cast<long long>(T), tokens_per_s,
        1000.0 * secs / static_cast<double>(steps), 100.0 * flops / peak, peak / 1e12,
        static_cast<double>(cuda::peak_bytes()) / (1024.0 * 1024.0 * 1024.0), loss, recipe,
        static_cast<double>(optimizer->state_bytes()) / (1024.0 * 1024.0 * 1024.0));
    std::printf("RESULT zerotrain tokens_per_s=%.0f peak_gib=%.3f gemm_tflops=%.1f recipe=%s\n", tokens_per_s,
                static_cast<double>(cuda::peak_bytes()) / (1024.0 * 1024.0 * 1024.0), peak / 1e12,
                no_master ? "no-master"
                : f32     ? "f32"
                : fp16    ? "fp16-master"
                          : "master");

    if (profile_steps > 0) {
      cuda::Timeline timeline;
      ProfileHooks hooks(timeline, model.registry());
      model.set_hooks(&hooks);
      for (int64_t s = 0; s < profile_steps; ++s) {
        timeline.mark("zero grads");
        model.zero_grads();
        model.forward_backward(tok, tgt, loss_scale / static_cast<float>(B * T));
        timeline.mark("optimizer");
        optimizer->step(os.lr, 1.0f / loss_scale);
      }
      timeline.mark("end");
      model.set_hooks(nullptr);
      print_profile(timeline.intervals(), profile_steps);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "gpu_train_step: %s\n", e.what());
    return e.exit_code();
  }
}
