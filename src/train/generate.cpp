// Token selection and the prefill-then-decode loop (see generate.h).
#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace zt::train {
namespace {

constexpr uint64_t kSampleStream = 0x5A3B1E;

int32_t argmax(const float* logits, int64_t V) {
  return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
}

bool greedy(const SamplingOptions& o) { return o.decoding == Decoding::Greedy || o.temperature <= 0.0f; }

// Fills scratch.order[0..k) with the kept token ids, most likely first, and
// scratch.probs[0..k) with their renormalised probabilities; returns k.
int64_t kept_distribution(const float* logits, int64_t V, const SamplingOptions& o, SamplerScratch& s) {
  s.order.resize(static_cast<size_t>(V));
  s.probs.resize(static_cast<size_t>(V));
  std::iota(s.order.begin(), s.order.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t k = o.top_k > 0 ? std::min<int64_t>(o.top_k, V) : V;
  // Without a filter the draw needs no order: ids stay in vocabulary order.
  if (o.top_p < 1.0f || k < V) std::partial_sort(s.order.begin(), s.order.begin() + k, s.order.end(), by_logit);
  const double inv_t = 1.0 / static_cast<double>(o.temperature);
  const double mx = *std::max_element(logits, logits + V);
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const double p = std::exp((static_cast<double>(logits[s.order[static_cast<size_t>(i)]]) - mx) * inv_t);
    s.probs[static_cast<size_t>(i)] = p;
    total += p;
  }
  if (o.top_p < 1.0f) {
    // HF TopPLogitsWarper: drop tokens once the mass before them already reaches top_p;
    // the most likely token always stays.
    double cum = 0.0;
    int64_t keep = 0;
    while (keep < k && (keep == 0 || cum < static_cast<double>(o.top_p) * total)) {
      cum += s.probs[static_cast<size_t>(keep)];
      ++keep;
    }
    k = keep;
    total = cum;
  }
  for (int64_t i = 0; i < k; ++i) s.probs[static_cast<size_t>(i)] /= total;
  return k;
}

}  // namespace

void validate(const SamplingOptions& o) {
  if (o.top_k < 0) ZT_THROW_INPUT("top-k must be >= 0 (0 disables it), got ", o.top_k);
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) ZT_THROW_INPUT("top-p must be in (0, 1] (1 disables it), got ", o.top_p);
  if (!std::isfinite(o.temperature)) ZT_THROW_INPUT("temperature must be a finite number, got ", o.temperature);
}

int32_t pick_token(const float* logits, int64_t V, const SamplingOptions& o, float u, SamplerScratch& s) {
  ZT_CHECK(V > 0, "pick_token: empty vocabulary");
  if (greedy(o)) return argmax(logits, V);
  const int64_t k = kept_distribution(logits, V, o, s);
  double left = static_cast<double>(u);
  for (int64_t i = 0; i < k; ++i) {
    left -= s.probs[static_cast<size_t>(i)];
    if (left < 0.0) return s.order[static_cast<size_t>(i)];
  }
  return s.order[static_cast<size_t>(k - 1)];  // u within rounding of 1
}

std::vector<double> sampling_distribution(const float* logits, int64_t V, const SamplingOptions& o) {
  std::vector<double> dist(static_cast<size_t>(V), 0.0);
  if (greedy(o)) {
    dist[static_cast<size_t>(argmax(logits, V))] = 1.0;
    return dist;
  }
  SamplerScratch s;
  const int64_t k = kept_distribution(logits, V, o, s);
  for (int64_t i = 0; i < k; ++i)
    dist[static_cast<size_t>(s.order[static_cast<size_t>(i)])] = s.probs[static_cast<size_t>(i)];
  return dist;
}

GenerateResult generate(model::InferenceEngine& engine, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const TokenCallback& on_token) {
  validate(o.sampling);
  if (prompt.empty()) ZT_THROW_INPUT("generate: the prompt has no tokens (give some text, or start from BOS)");
  if (o.max_new_tokens < 0) ZT_THROW_INPUT("max new tokens must be >= 0, got ", o.max_new_tokens);
  ZT_CHECK(engine.batch_size() == 1, "generate: the engine must have batch size 1");
  const int64_t cap = engine.capacity();
  const int64_t V = engine.config().vocab_size;
  const Philox rng(o.seed, kSampleStream);
  SamplerScratch scratch;
  GenerateResult result;

  // The context the cache holds: the prompt (its last `cap` tokens) and what follows.
  std::vector<int32_t> context(prompt.end() - std::min<int64_t>(static_cast<int64_t>(prompt.size()), cap),
                               prompt.end());
  engine.reset();
  std::vector<float> logits = engine.forward(context);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    if (o.stop_check && o.stop_check(step) == Generation::Stop) {
      result.reason = StopReason::Stopped;
      break;
    }
    const int32_t next = pick_token(logits.data(), V, o.sampling, rng.uniform(static_cast<uint64_t>(step)), scratch);
    result.tokens.push_back(next);
    const bool stop = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next) != o.stop_tokens.end();
    if (on_token && on_token(next) == StreamControl::Stop) {
      result.reason = StopReason::Callback;
      break;
    }
    if (stop) {
      result.reason = StopReason::StopToken;
      break;
    }
    if (step + 1 == o.max_new_tokens) break;  // no logits needed after the last token
    context.push_back(next);
    if (engine.remaining() == 0) {
      // Slide: keep the most recent half of the window and recompute its cache.
      const int64_t keep = std::max<int64_t>(1, cap / 2);
      context.erase(context.begin(), context.end() - keep);
      engine.reset();
      logits = engine.forward(context);
    } else {
      logits = engine.forward(std::vector<int32_t>{next});
    }
  }
  return result;
}

std::vector<int32_t> sample(model::Transformer& model, std::vector<int32_t> ids, const SampleOptions& so) {
  const auto& c = model.config();
  if (ids.empty()) ids.push_back(static_cast<int32_t>(std::max<int64_t>(c.bos_token_id, 0)));
  // A cache for this generation only (the model's whole context can be gigabytes, e.g.
  // 131,072 positions for Llama-3.2).
  model::InferenceOptions io;
  io.max_seq_len = std::min<int64_t>(c.max_position_embeddings, static_cast<int64_t>(ids.size()) + so.max_new_tokens);
  model::InferenceEngine engine(model, io);
  GenerateOptions o;
  o.max_new_tokens = so.max_new_tokens;
  o.seed = so.seed;
  o.sampling.temperature = so.temperature;
  o.sampling.top_k = so.top_k;
  o.sampling.top_p = so.top_p;
  if (so.stop_token >= 0) o.stop_tokens.push_back(static_cast<int32_t>(so.stop_token));
  o.stop_check = so.stop_check;
  const GenerateResult r = generate(engine, ids, o);
  ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
  return ids;
}

}  // namespace zt::train
