// zerotrain train: with no arguments, the built-in run (tiny GPT-2 on the repo's text,
// then a sample).
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "train/simple_trainer.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain train [options]

With no options: train the built-in tiny GPT-2 on the repo's text, then sample from it.

  --preset NAME          tiny-gpt2 (default), tiny-llama, gpt2, gpt2-medium, gpt2-large,
                         gpt2-xl, llama-3.2-1b
  --text FILE            training text (default: data/text/gpl-3.txt)
  --steps N              optimizer steps (300)
  --batch-size N         sequences per step (8)
  --seq-len N            tokens per sequence (128)
  --lr X                 peak learning rate (3e-3), cosine decay after warmup
  --warmup N             warmup steps (20)
  --weight-decay X       AdamW weight decay (0.1)
  --grad-clip X          global gradient-norm clip (1.0; 0 disables)
  --seed N               seed for init, data order and sampling (1337)
  --dtype f32|bf16|f16   parameter storage dtype (f32); compute is f32 on CPU
  --checkpointing        recompute each block in backward (activation checkpointing)
  --log-interval N       steps between log lines (10)
  --eval-interval N      steps between validation losses (100)
  --sample-tokens N      tokens to sample after training (300; 0 skips)
  --prompt TEXT          sampling prompt ("The ")
  --temperature X        sampling temperature (0.8)
  --top-k N              sample among the k likeliest tokens (40)
  --threads N            CPU threads (default: all cores)
  --log-level LEVEL      debug, info, warn, error
)";

int run_train(const Args& args) {
  train::SimpleRunOptions o;
  ArgParser p("train");
  p.value("--preset", [&](const std::string& v) { o.preset = v; });
  p.value("--text", [&](const std::string& v) { o.text_path = v; });
  p.value("--steps", [&](const std::string& v) { o.steps = parse_int("--steps", v); });
  p.value("--batch-size", [&](const std::string& v) { o.batch_size = parse_int("--batch-size", v); });
  p.value("--seq-len", [&](const std::string& v) { o.seq_len = parse_int("--seq-len", v); });
  p.value("--lr", [&](const std::string& v) { o.lr = static_cast<float>(parse_double("--lr", v)); });
  p.value("--warmup", [&](const std::string& v) { o.warmup_steps = parse_int("--warmup", v); });
  p.value("--weight-decay", [&](const std::string& v) { o.weight_decay = static_cast<float>(parse_double("--weight-decay", v)); });
  p.value("--grad-clip", [&](const std::string& v) { o.grad_clip = static_cast<float>(parse_double("--grad-clip", v)); });
  p.value("--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v)); });
  p.value("--dtype", [&](const std::string& v) { o.param_dtype = parse_dtype(v); });
  p.value("--log-interval", [&](const std::string& v) { o.log_interval = parse_int("--log-interval", v); });
  p.value("--eval-interval", [&](const std::string& v) { o.eval_interval = parse_int("--eval-interval", v); });
  p.value("--sample-tokens", [&](const std::string& v) { o.sample_tokens = parse_int("--sample-tokens", v); });
  p.value("--prompt", [&](const std::string& v) { o.prompt = v; });
  p.value("--temperature", [&](const std::string& v) { o.temperature = static_cast<float>(parse_double("--temperature", v)); });
  p.value("--top-k", [&](const std::string& v) { o.top_k = static_cast<int>(parse_int("--top-k", v)); });
  p.value("--threads", [&](const std::string& v) { set_num_threads(static_cast<int>(parse_int("--threads", v))); });
  p.value("--log-level", [&](const std::string& v) { set_log_level(parse_log_level(v)); });
  p.flag("--checkpointing", [&] { o.checkpointing = model::Checkpointing::EveryBlock; });
  p.parse(args);
  if (o.steps < 1 || o.batch_size < 1 || o.seq_len < 1 || o.log_interval < 1)
    ZT_THROW_INPUT("--steps, --batch-size, --seq-len and --log-interval must be positive");
  train::run_simple_training(o);
  return 0;
}

const Registrar registrar{{"train", "train a model (no options: the built-in tiny GPT on the repo's text)", run_train, kHelp}};

}  // namespace
}  // namespace zt::cli
