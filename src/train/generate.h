// Autoregressive generation over the KV-cache inference engine: temperature, top-k,
// top-p (nucleus), greedy, stop tokens, a per-token streaming callback, seeded sampling.
//
// Randomness: step i of a generation draws Philox(seed, kSampleStream).uniform(i), so a
// seed gives the same tokens on every run, thread count and machine.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/inference.h"
#include "model/transformer.h"

namespace zt::train {

enum class Decoding { Sample, Greedy };

// HF generate's order: logits / temperature, then top-k, then top-p, then a draw.
struct SamplingOptions {
  Decoding decoding = Decoding::Sample;
  float temperature = 1.0f;  // <= 0 means greedy
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // 1: no nucleus filter; keeps the smallest set with mass >= top_p
};

// Reusable buffers for pick_token (so a decode step allocates nothing).
struct SamplerScratch {
  std::vector<int32_t> order;
  std::vector<double> probs;
};

// The next token from logits[V] given u uniform in [0, 1). Greedy takes the first
// maximum. Bad options (top_p outside (0, 1], negative top_k) are BadInput errors.
int32_t pick_token(const float* logits, int64_t V, const SamplingOptions& options, float u, SamplerScratch& scratch);
// The distribution pick_token draws from (after temperature, top-k, top-p), for tests
// and diagnostics: probabilities [V], zero outside the kept set.
std::vector<double> sampling_distribution(const float* logits, int64_t V, const SamplingOptions& options);
void validate(const SamplingOptions& options);

enum class StreamControl { Continue, Stop };
// Called once per generated token (stop tokens included) as soon as it is chosen.
using TokenCallback = std::function<StreamControl(int32_t token)>;

// Asked before each new token is chosen (`token`: its 0-based index among the generated
// ones); true ends the generation there. A stop signal's check: a generation of thousands
// of tokens must not outlast SIGTERM (train/signals.h).
enum class Generation { Continue, Stop };
using StopCheck = std::function<Generation(int64_t token)>;

struct GenerateOptions {
  int64_t max_new_tokens = 100;
  SamplingOptions sampling;
  uint64_t seed = 0;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these (e.g. EOS)
  StopCheck stop_check;              // none: only the limits above end it
};

enum class StopReason { MaxNewTokens, StopToken, Callback, Stopped };

struct GenerateResult {
  std::vector<int32_t> tokens;  // the generated tokens (a final stop token included)
  StopReason reason = StopReason::MaxNewTokens;
};

// Prefills `prompt` (non-empty) into a fresh cache, then decodes one token at a time.
// When the cache is full, the last half of the context is re-prefilled (a sliding
// window, as the model cannot see further back than its context anyway).
GenerateResult generate(model::InferenceEngine& engine, const std::vector<int32_t>& prompt,
                        const GenerateOptions& options, const TokenCallback& on_token = {});

// The built-in run's sampler (kept for train::run_simple_training): temperature 0 is
// greedy. Returns prompt + generated ids; an empty prompt starts from BOS (or id 0).
struct SampleOptions {
  int64_t max_new_tokens = 100;
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: whole vocabulary
  float top_p = 1.0f;
  uint64_t seed = 0;
  int64_t stop_token = -1;  // stop after emitting this id (e.g. EOS); -1: never
  StopCheck stop_check;     // as GenerateOptions::stop_check
};
std::vector<int32_t> sample(model::Transformer& model, std::vector<int32_t> prompt, const SampleOptions& options);

}  // namespace zt::train
