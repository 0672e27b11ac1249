// zerotrain command line: thin; parses flags and calls the library.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "train/simple_trainer.h"

namespace {

constexpr const char* kUsage = R"(zerotrain — train and fine-tune LLMs with ZeRO sharding

usage: zerotrain <command> [options]

commands:
  train      train a model (with no options: the built-in tiny GPT-2 on the repo's
             text, then sample from it)
  version    print the version
  help       print this help

train options:
  --preset NAME          tiny-gpt2 (default), tiny-llama, gpt2, gpt2-medium, gpt2-large,
                         gpt2-xl, llama-3.2-1b
  --text FILE            training text (default: data/text/licenses.txt)
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

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
      prev = cur;
    }
  }
  return row[b.size()];
}

int64_t parse_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) ZT_THROW_INPUT(flag, " expects an integer, got '", v, "'");
  return x;
}

float parse_float(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const float x = std::strtof(v.c_str(), &end);
  if (v.empty() || *end) ZT_THROW_INPUT(flag, " expects a number, got '", v, "'");
  return x;
}

int run_train(const std::vector<std::string>& args) {
  zt::train::SimpleRunOptions o;
  using Setter = std::function<void(const std::string&)>;
  std::map<std::string, Setter> with_value = {
      {"--preset", [&](const std::string& v) { o.preset = v; }},
      {"--text", [&](const std::string& v) { o.text_path = v; }},
      {"--steps", [&](const std::string& v) { o.steps = parse_int("--steps", v); }},
      {"--batch-size", [&](const std::string& v) { o.batch_size = parse_int("--batch-size", v); }},
      {"--seq-len", [&](const std::string& v) { o.seq_len = parse_int("--seq-len", v); }},
      {"--lr", [&](const std::string& v) { o.lr = parse_float("--lr", v); }},
      {"--warmup", [&](const std::string& v) { o.warmup_steps = parse_int("--warmup", v); }},
      {"--weight-decay", [&](const std::string& v) { o.weight_decay = parse_float("--weight-decay", v); }},
      {"--grad-clip", [&](const std::string& v) { o.grad_clip = parse_float("--grad-clip", v); }},
      {"--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v)); }},
      {"--dtype", [&](const std::string& v) { o.param_dtype = zt::parse_dtype(v); }},
      {"--log-interval", [&](const std::string& v) { o.log_interval = parse_int("--log-interval", v); }},
      {"--eval-interval", [&](const std::string& v) { o.eval_interval = parse_int("--eval-interval", v); }},
      {"--sample-tokens", [&](const std::string& v) { o.sample_tokens = parse_int("--sample-tokens", v); }},
      {"--prompt", [&](const std::string& v) { o.prompt = v; }},
      {"--temperature", [&](const std::string& v) { o.temperature = parse_float("--temperature", v); }},
      {"--top-k", [&](const std::string& v) { o.top_k = static_cast<int>(parse_int("--top-k", v)); }},
      {"--threads", [&](const std::string& v) { zt::set_num_threads(static_cast<int>(parse_int("--threads", v))); }},
      {"--log-level", [&](const std::string& v) { zt::set_log_level(zt::parse_log_level(v)); }},
  };
  std::map<std::string, std::function<void()>> switches = {
      {"--checkpointing", [&] { o.checkpointing = zt::model::Checkpointing::EveryBlock; }},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const size_t eq = flag.find('=');
    const bool inline_value = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (auto s = switches.find(flag); s != switches.end()) {
      s->second();
    } else if (auto w = with_value.find(flag); w != with_value.end()) {
      if (!inline_value) {
        if (i + 1 >= args.size()) ZT_THROW_INPUT(flag, " needs a value");
        value = args[++i];
      }
      w->second(value);
    } else {
      std::string best;
      size_t best_d = 4;
      for (const auto& kv : with_value)
        if (size_t d = edit_distance(flag, kv.first); d < best_d) best_d = d, best = kv.first;
      for (const auto& kv : switches)
        if (size_t d = edit_distance(flag, kv.first); d < best_d) best_d = d, best = kv.first;
      ZT_THROW_INPUT("unknown option '", flag, "' for 'zerotrain train'",
                     best.empty() ? std::string() : " (did you mean " + best + "?)",
                     "; see 'zerotrain help'");
    }
  }
  if (o.steps < 1 || o.batch_size < 1 || o.seq_len < 1 || o.log_interval < 1)
    ZT_THROW_INPUT("--steps, --batch-size, --seq-len and --log-interval must be positive");
  zt::train::run_simple_training(o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    zt::init_threads_from_env();
    if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
      std::fputs(kUsage, stdout);
      return args.empty() ? 2 : 0;
    }
    const std::string command = args[0];
    args.erase(args.begin());
    if (command == "version" || command == "--version") {
      std::puts("zerotrain 0.1.0");
      return 0;
    }
    if (command == "train") return run_train(args);
    ZT_THROW_INPUT("unknown command '", command, "': see 'zerotrain help'");
  } catch (const zt::Error& e) {
    std::fprintf(stderr, "zerotrain: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zerotrain: internal error: %s\n", e.what());
    return 1;
  }
}
