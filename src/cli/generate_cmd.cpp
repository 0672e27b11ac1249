// zerotrain generate: text from a HF model directory, streamed to stdout as it is made.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/device_init.h"
#include "core/device.h"
#include "core/error.h"
#include "core/fail_point.h"
#include "core/log.h"
#include "core/parallel.h"
#include "io/tokenizer.h"
#include "model/inference.h"
#include "model/inference_load.h"
#include "train/generate.h"
#include "train/signals.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain generate --model DIR --prompt TEXT [options]

Generates a continuation of TEXT with the model in DIR (a HF directory: config.json,
safetensors weights, tokenizer files; zerotrain's trained outputs have the same layout).
The prompt is printed, then the new text as each token is chosen. SIGINT, SIGTERM or
SIGUSR1 stop it before the next token: the text so far is printed, exit code 128 + the
signal.

  --model DIR            HF model directory (GPT-2, Llama, Mistral, Qwen2), or a PEFT
                         adapter folder whose base_model_name_or_path is one
  --adapter DIR          a PEFT LoRA adapter folder (a LoRA run's final/) on top of
                         --model's weights (merged in f32 when loaded)
  --prompt TEXT          the text to continue (empty: start from the BOS token)
  --max-new-tokens N     tokens to generate at most (100)
  --temperature T        softmax temperature (1.0; 0 is greedy)
  --top-k K              sample among the K likeliest tokens (50, as HF; 0 disables)
  --top-p P              nucleus sampling: the smallest set with probability >= P (1.0 disables)
  --greedy               always take the likeliest token (ignores temperature, top-k, top-p)
  --seed S               sampling seed (0); the same seed gives the same text
  --ignore-eos           keep going after an end-of-sequence token
  --tokenizer PATH       tokenizer file or directory (default: DIR); "bytes": byte ids
  --device DEV           cpu (the default) or cuda: the model (f32), its KV cache and
                         every step run on the GPU; sampling reads the logits on the host
  --threads N            CPU threads (default: all cores)
  --log-level LEVEL      debug, info, warn, error
)";

bool ends_in_partial_character(const std::string& s) {
  // U+FFFD: the tokenizer's stand-in for an incomplete UTF-8 sequence; more tokens
  // usually complete it (HF's TextStreamer holds such text back the same way).
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

int run_generate(const Args& args) {
  std::string model_dir, prompt, tokenizer_path;
  bool have_prompt = false, ignore_eos = false;
  Device device = Device::cpu();
  train::GenerateOptions o;
  o.sampling.top_k = 50;
  ArgParser p("generate");
  std::string adapter_dir;
  p.value("--model", [&](const std::string& v) { model_dir = v; });
  p.value("--adapter", [&](const std::string& v) { adapter_dir = v; });
  p.value("--prompt", [&](const std::string& v) {
    prompt = v;
    have_prompt = true;
  });
  p.value("--max-new-tokens", [&](const std::string& v) { o.max_new_tokens = parse_int("--max-new-tokens", v); });
  p.value("--temperature",
          [&](const std::string& v) { o.sampling.temperature = static_cast<float>(parse_double("--temperature", v)); });
  p.value("--top-k", [&](const std::string& v) { o.sampling.top_k = parse_int("--top-k", v); });
  p.value("--top-p", [&](const std::string& v) { o.sampling.top_p = static_cast<float>(parse_double("--top-p", v)); });
  p.value("--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v)); });
  p.value("--tokenizer", [&](const std::string& v) { tokenizer_path = v; });
  p.value("--device", [&](const std::string& v) { device = parse_device(v); });
  p.value("--threads", [&](const std::string& v) { apply_threads_flag(v); });
  p.value("--log-level", [&](const std::string& v) { set_log_level(parse_log_level(v)); });
  p.flag("--greedy", [&] { o.sampling.decoding = train::Decoding::Greedy; });
  p.flag("--ignore-eos", [&] { ignore_eos = true; });
  p.parse(args);
  if (model_dir.empty()) ZT_THROW_INPUT("generate: --model DIR is required (a HF model directory)");
  if (!have_prompt) ZT_THROW_INPUT("generate: --prompt TEXT is required (--prompt \"\" starts from BOS)");
  if (o.max_new_tokens < 1) ZT_THROW_INPUT("--max-new-tokens must be positive, got ", o.max_new_tokens);
  if (o.sampling.temperature < 0.0f) ZT_THROW_INPUT("--temperature must be >= 0, got ", o.sampling.temperature);
  train::validate(o.sampling);
  init_device("generate", device);  // before minutes of loading

  const model::ModelAndAdapter chosen = model::resolve_model_and_adapter(model_dir, adapter_dir);
  model_dir = chosen.model;
  model::InferenceModel m = model::load_for_inference(model_dir, DType::F32, device, chosen.adapter);
  const auto tok = tokenizer_path == "bytes" ? io::make_byte_tokenizer()
                                             : io::load_tokenizer(tokenizer_path.empty() ? chosen.tokenizer : tokenizer_path);
  std::vector<int32_t> ids = tok->encode(prompt, io::SpecialTokens::Add);
  if (ids.empty()) {
    const int64_t bos = tok->bos_id() >= 0 ? tok->bos_id() : m.config.bos_token_id;
    if (bos < 0) ZT_THROW_INPUT("generate: the prompt is empty and the model has no BOS token: give a --prompt");
    ids.push_back(static_cast<int32_t>(bos));
  }
  for (int32_t id : ids)
    if (id >= m.config.vocab_size)
      ZT_THROW_INPUT("the tokenizer gave id ", id, " but the model's vocabulary has ", m.config.vocab_size,
                     " entries: the tokenizer does not belong to ", model_dir, " (use --tokenizer)");
  if (!ignore_eos) {
    o.stop_tokens = m.eos_token_ids;
    if (tok->eos_id() >= 0) o.stop_tokens.push_back(tok->eos_id());
  }

  model::InferenceEngine engine(*m.model);
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::vector<int32_t> generated;
  size_t printed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // SIGINT / SIGTERM / SIGUSR1 end the generation before the next token: the text so far
  // is printed whole (no cut UTF-8 sequence) with the count, and the exit code is 128 + the
  // signal, as a shell reports a program the signal ended. Fault drills (ZT_TEST_SIGNALS
  // sample@N) raise one before token N.
  train::StopSignals signals;
  const FaultInjector drills(0);
  o.stop_check = [&](int64_t token) {
    drills.at(TrainPoint::SampleToken, token);
    return signals.requested() ? train::Generation::Stop : train::Generation::Continue;
  };
  const train::GenerateResult r = train::generate(engine, ids, o, [&](int32_t id) {
    generated.push_back(id);
    const std::string text = tok->decode(generated, /*skip_special_tokens=*/true);
    if (!ends_in_partial_character(text) && text.size() > printed) {
      std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
      std::fflush(stdout);
      printed = text.size();
    }
    return train::StreamControl::Continue;
  });
  const std::string text = tok->decode(generated, true);
  if (text.size() > printed) std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ZT_INFO("generated ", r.tokens.size(), " tokens in ", secs, " s (", static_cast<double>(r.tokens.size()) / secs,
          " tokens/s, prompt ", ids.size(), " tokens)",
          r.reason == train::StopReason::StopToken ? ", stopped at end of sequence" : "");
  if (r.reason == train::StopReason::Stopped) {
    ZT_WARN("received signal ", signals.signal(), ": generation stopped after ", r.tokens.size(), " of at most ",
            o.max_new_tokens, " tokens");
    return 128 + signals.signal();
  }
  return 0;
}

const Registrar registrar{
    {"generate", "generate text from a HF model directory (KV cache, sampling)", run_generate, kHelp}};

}  // namespace
}  // namespace zt::cli
