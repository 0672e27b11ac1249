// CPU training-step benchmark: forward + backward + AdamW of a GPT-2-shaped model
// (default: 6 layers, width 384, 6 heads, T=256, batch 8, GPT-2 vocabulary), in tokens/s.
// bench/cpu_vs_torch.sh runs it next to the same step in PyTorch and prints the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "zero/adamw.h"

using namespace zt;

int main(int argc, char** argv) {
  init_threads_from_env();
  int64_t layers = 6, width = 384, heads = 6, T = 256, B = 8, vocab = 50257, steps = 5, warmup = 2;
  std::string family = "gpt2";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--layers")
      layers = std::stoll(v);
    else if (k == "--width")
      width = std::stoll(v);
    else if (k == "--heads")
      heads = std::stoll(v);
    else if (k == "--seq")
      T = std::stoll(v);
    else if (k == "--batch")
      B = std::stoll(v);
    else if (k == "--vocab")
      vocab = std::stoll(v);
    else if (k == "--steps")
      steps = std::stoll(v);
    else if (k == "--warmup")
      warmup = std::stoll(v);
    else if (k == "--family")
      family = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  model::ModelConfig c = model::preset_config(family == "llama" ? "tiny-llama" : "gpt2");
  c.num_layers = layers;
  c.hidden_size = width;
  c.num_heads = c.num_kv_heads = heads;
  c.head_dim = width / heads;
  c.rope.head_dim = static_cast<int>(c.head_dim);
  c.intermediate_size = 4 * width;
  c.vocab_size = vocab;
  c.max_position_embeddings = std::max<int64_t>(T, 1024);
  model::Transformer m(c, model::ModelOptions{});
  m.init_weights(1);
  zero::OptimizerSpec spec;
  spec.weight_decay = 0.1f;
  zero::AdamW opt(m.registry(), spec);

  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  Philox rng(5, 5);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.block(i)[0] % static_cast<uint32_t>(vocab));
    targets[i] = static_cast<int32_t>(rng.block(i)[1] % static_cast<uint32_t>(vocab));
  }
  const Tensor tok(tokens.data(), {B, T}, DType::I32), tgt(targets.data(), {B, T}, DType::I32);
  std::vector<double> times;
  double loss = 0;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    m.zero_grads();
    const auto r = m.forward_backward(tok, tgt, 1.0f / static_cast<float>(B * T));
    opt.step(1e-4f, 1.0f);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss = r.loss_sum / static_cast<double>(r.count);
    if (s >= warmup) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::printf("zerotrain: %lld params, %d threads, step %.3f s (median of %zu), %.0f tokens/s, loss %.4f\n",
              static_cast<long long>(c.num_parameters()), num_threads(), median, times.size(),
              static_cast<double>(B * T) / median, loss);
  std::printf("RESULT tokens_per_s=%.1f\n", static_cast<double>(B * T) / median);
  return 0;
}
