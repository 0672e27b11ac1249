#include "train/simple_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "io/byte_tokenizer.h"
#include "train/generate.h"
#include "zero/optimizer.h"

namespace zt::train {

float cosine_lr(float lr, float min_ratio, int64_t warmup, int64_t total, int64_t step) {
  if (step < warmup) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const double progress = total > warmup ? static_cast<double>(step - warmup) / static_cast<double>(total - warmup) : 1.0;
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * std::min(progress, 1.0)));
  return static_cast<float>(lr * (min_ratio + (1.0 - min_ratio) * cosine));
}

namespace {

// Random windows of T+1 tokens: inputs are the first T, targets the last T.
void fill_batch(const std::vector<int32_t>& data, int64_t B, int64_t T, const Philox& rng, uint64_t draw,
                std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  const uint64_t span = data.size() - static_cast<size_t>(T) - 1;
  for (int64_t b = 0; b < B; ++b) {
    const auto words = rng.block(draw * static_cast<uint64_t>(B) + static_cast<uint64_t>(b));
    const uint64_t start = ((static_cast<uint64_t>(words[0]) << 32) | words[1]) % span;
    for (int64_t t = 0; t < T; ++t) {
      tokens[static_cast<size_t>(b * T + t)] = data[start + static_cast<size_t>(t)];
      targets[static_cast<size_t>(b * T + t)] = data[start + static_cast<size_t>(t) + 1];
    }
  }
}

std::string default_text_path() { return std::string(ZT_SOURCE_DIR) + "/data/text/gpl-3.txt"; }

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) out.push_back((ch >= 32 && ch < 127) || ch == '\n' ? static_cast<char>(ch) : '?');
  return out;
}

}  // namespace

SimpleRunResult run_simple_training(const SimpleRunOptions& o) {
  const std::string path = o.text_path.empty() ? default_text_path() : o.text_path;
  const std::vector<int32_t> all = io::byte_encode(io::read_text_file(path));
  const size_t split = all.size() * 9 / 10;
  const std::vector<int32_t> train_data(all.begin(), all.begin() + static_cast<int64_t>(split));
  const std::vector<int32_t> val_data(all.begin() + static_cast<int64_t>(split), all.end());
  const int64_t B = o.batch_size, T = o.seq_len;
  if (static_cast<int64_t>(val_data.size()) < T + 2)
    ZT_THROW_INPUT("'", path, "' is too short (", all.size(), " bytes) for sequences of ", T,
                   " tokens: use a longer text or a smaller --seq-len");

  model::ModelConfig config = model::preset_config(o.preset);
  if (T > config.max_position_embeddings)
    ZT_THROW_INPUT("--seq-len ", T, " exceeds the model's context of ", config.max_position_embeddings);
  if (config.vocab_size < 256) ZT_THROW_INPUT("preset '", o.preset, "' has fewer than 256 tokens for byte input");
  model::ModelOptions mo;
  mo.param_dtype = o.param_dtype;
  mo.grad_dtype = o.param_dtype;
  mo.checkpointing = o.checkpointing;
  model::Transformer model(config, mo);
  model.init_weights(o.seed);
  zero::OptimizerSpec spec;
  spec.beta2 = 0.95f;
  spec.weight_decay = o.weight_decay;
  const auto optimizer = zero::make_optimizer(model.registry(), spec);

  ZT_INFO("model ", o.preset, ": ", config.num_parameters(), " parameters, ", config.num_layers, " layers, width ",
          config.hidden_size, "; data '", path, "': ", train_data.size(), " train / ", val_data.size(),
          " val tokens (bytes); batch ", B, " x ", T, ", ", o.steps, " steps, ", num_threads(), " threads");

  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(static_cast<size_t>(B * T));
  const Tensor tok(tokens.data(), {B, T}, DType::I32), tgt(targets.data(), {B, T}, DType::I32);
  const Philox train_rng(o.seed, 1), val_rng(o.seed, 2);
  SimpleRunResult result;

  auto val_loss = [&]() {
    model.set_mode(model::Mode::Eval);
    double sum = 0;
    int64_t count = 0;
    for (uint64_t i = 0; i < 4; ++i) {
      fill_batch(val_data, B, T, val_rng, i, tokens, targets);
      const auto r = model.forward(tok, tgt);
      sum += r.loss_sum;
      count += r.count;
    }
    model.set_mode(model::Mode::Train);
    return sum / static_cast<double>(count);
  };

  const double flops_per_step = config.flops_per_token(T) * static_cast<double>(B * T);
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    fill_batch(train_data, B, T, train_rng, static_cast<uint64_t>(step), tokens, targets);
    model.zero_grads();
    model.set_dropout_seed(o.seed, static_cast<uint64_t>(step));
    const int64_t count = model::count_targets(tgt);
    const auto r = model.forward_backward(tok, tgt, 1.0f / static_cast<float>(count));
    const double loss = r.loss_sum / static_cast<double>(r.count);
    const double norm = zero::global_grad_norm(model.registry());
    const float clip = (o.grad_clip > 0 && norm > o.grad_clip) ? static_cast<float>(o.grad_clip / (norm + 1e-6)) : 1.0f;
    const float lr = cosine_lr(o.lr, o.min_lr_ratio, o.warmup_steps, o.steps, step);
    optimizer->step(lr, clip);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step == 0) result.first_loss = loss;
    result.final_loss = loss;
    if (step % o.log_interval == 0 || step == o.steps - 1) {
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | %.1f GFLOP/s | %.0f ms\n",
                  static_cast<long long>(step + 1), static_cast<long long>(o.steps), loss, lr, norm,
                  static_cast<double>(B * T) / secs, flops_per_step / secs * 1e-9, secs * 1e3);
      std::fflush(stdout);
    }
    if ((o.eval_interval > 0 && (step + 1) % o.eval_interval == 0) || step == o.steps - 1) {
      result.final_val_loss = val_loss();
      std::printf("step %5lld/%lld | val loss %.4f | val ppl %.2f\n", static_cast<long long>(step + 1),
                  static_cast<long long>(o.steps), result.final_val_loss, std::exp(result.final_val_loss));
      std::fflush(stdout);
    }
  }

  if (o.sample_tokens > 0) {
    SampleOptions so;
    so.max_new_tokens = o.sample_tokens;
    so.temperature = o.temperature;
    so.top_k = o.top_k;
    so.seed = o.seed;
    const std::vector<int32_t> ids = sample(model, io::byte_encode(o.prompt), so);
    result.sample = io::byte_decode(ids);
    std::printf("---- sample (temperature %.2f, top-k %d) ----\n%s\n----\n", o.temperature, o.top_k,
                printable(result.sample).c_str());
  }
  return result;
}

}  // namespace zt::train
