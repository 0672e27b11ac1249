// KV-cache inference, sampling and evaluation.
//
// The engine's logits must equal Transformer::forward_logits of the whole sequence at
// every position (prefill rows, decode steps, chunked prompts, batches) for both
// families, GQA and Llama-3 RoPE scaling included. Sampling is checked against its
// definition (softmax / temperature, top-k, top-p as HF's warpers) and by drawing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "core/error.h"
#include "model/config.h"
#include "model/inference.h"
#include "common/perturb.h"
#include "model/transformer.h"
#include "train/evaluate.h"
#include "train/generate.h"

using namespace zt;
using namespace zt::model;

namespace {

using zt::testing::perturb;

std::unique_ptr<Transformer> make_model(const ModelConfig& c, uint64_t seed = 1234) {
  ModelOptions o;
  o.allocate_grads = false;
  auto m = std::make_unique<Transformer>(c, o);
  m->init_weights(seed);
  perturb(*m, seed + 1);
  m->set_mode(Mode::Eval);
  return m;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  return t;
}

ModelConfig llama_gqa_llama3() {
  ModelConfig c = preset_config("tiny-llama");
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.rope.head_dim = 32;
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
  c.tie_word_embeddings = false;
  c.vocab_size = 500;
  c.rope.theta = 500000.0f;
  c.rope.scaling.type = ops::RopeScaling::Type::Llama3;
  c.rope.scaling.factor = 8.0f;
  c.rope.scaling.low_freq_factor = 1.0f;
  c.rope.scaling.high_freq_factor = 4.0f;
  c.rope.scaling.original_max_position_embeddings = 16;  // short: the scaled bands matter at T ~ 40
  c.validate("llama gqa llama3");
  return c;
}

ModelConfig gpt2_untied() {
  ModelConfig c = preset_config("tiny-gpt2");
  c.vocab_size = 300;
  c.tie_word_embeddings = false;
  c.validate("gpt2 untied");
  return c;
}

// max |a - b| / max |b|.
double scaled_err(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

constexpr double kLogitsTol = 1e-5;

class DecodeParity : public ::testing::TestWithParam<int> {
 protected:
  static ModelConfig config(int i) {
    switch (i) {
      case 0:
        return preset_config("tiny-gpt2");
      case 1:
        return gpt2_untied();
      case 2:
        return preset_config("tiny-llama");
      default:
        return llama_gqa_llama3();
    }
  }
};

// Prefill P tokens (every row's logits), then decode one token at a time.
TEST_P(DecodeParity, PrefillThenDecodeEqualsFullForwardAtEveryPosition) {
  const ModelConfig c = config(GetParam());
  auto m = make_model(c);
  const int64_t T = 40, P = 7, V = c.vocab_size;
  std::vector<int32_t> ids = random_tokens(T, V, 11);
  OwnedTensor full({1, T, V}, DType::F32);
  m->forward_logits(Tensor(ids.data(), {1, T}, DType::I32), full);

  InferenceEngine engine(*m);
  OwnedTensor pre({1, P, V}, DType::F32);
  engine.forward(Tensor(ids.data(), {1, P}, DType::I32), pre, LogitsFor::AllTokens);
  EXPECT_EQ(engine.position(), P);
  double worst = scaled_err(pre.data<float>(), full.data<float>(), P * V);
  for (int64_t t = P; t < T; ++t) {
    const std::vector<float> step = engine.forward(std::vector<int32_t>{ids[static_cast<size_t>(t)]});
    worst = std::max(worst, scaled_err(step.data(), full.data<float>() + t * V, V));
  }
  std::printf("[decode parity %d] worst scaled logits error %.2e\n", GetParam(), worst);
  EXPECT_LT(worst, kLogitsTol);
}

// Uneven chunks, two sequences at once, LastToken rows: each chunk's last logits.
TEST_P(DecodeParity, ChunkedBatchedPrefillEqualsFullForward) {
  const ModelConfig c = config(GetParam());
  auto m = make_model(c);
  const int64_t B = 2, T = 33, V = c.vocab_size;
  std::vector<int32_t> ids = random_tokens(B * T, V, 12);
  OwnedTensor full({B, T, V}, DType::F32);
  m->forward_logits(Tensor(ids.data(), {B, T}, DType::I32), full);

  InferenceOptions io;
  io.batch_size = B;
  io.max_seq_len = T;
  InferenceEngine engine(*m, io);
  double worst = 0;
  for (int64_t start = 0, chunk = 1; start < T; start += chunk, chunk = chunk % 5 + 2) {
    const int64_t n = std::min(chunk, T - start);
    std::vector<int32_t> part(static_cast<size_t>(B * n));
    for (int64_t b = 0; b < B; ++b) std::copy_n(ids.begin() + b * T + start, n, part.begin() + b * n);
    OwnedTensor last({B, V}, DType::F32);
    engine.forward(Tensor(part.data(), {B, n}, DType::I32), last, LogitsFor::LastToken);
    for (int64_t b = 0; b < B; ++b)
      worst =
          std::max(worst, scaled_err(last.data<float>() + b * V, full.data<float>() + (b * T + start + n - 1) * V, V));
  }
  EXPECT_EQ(engine.position(), T);
  EXPECT_LT(worst, kLogitsTol);
  // Full: one more token does not fit; the error says so.
  std::vector<int32_t> one(static_cast<size_t>(B), 1);
  OwnedTensor last({B, V}, DType::F32);
  try {
    engine.forward(Tensor(one.data(), {B, 1}, DType::I32), last);
    ADD_FAILURE() << "a token past the cache capacity was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("do not fit the cache"), std::string::npos) << e.what();
  }
  // Rewind: truncate and run the last token again; same logits.
  engine.truncate(T - 1);
  std::vector<int32_t> tail{ids[static_cast<size_t>(T - 1)], ids[static_cast<size_t>(2 * T - 1)]};
  engine.forward(Tensor(tail.data(), {B, 1}, DType::I32), last);
  EXPECT_LT(scaled_err(last.data<float>(), full.data<float>() + (T - 1) * V, V), kLogitsTol);
  EXPECT_LT(scaled_err(last.data<float>() + V, full.data<float>() + (2 * T - 1) * V, V), kLogitsTol);
}

std::string family_name(const ::testing::TestParamInfo<int>& i) {
  static const char* const names[] = {"Gpt2", "Gpt2UntiedPaddedVocab", "TinyLlama", "LlamaGqaLlama3RopeBiases"};
  return names[i.param];
}
INSTANTIATE_TEST_SUITE_P(Families, DecodeParity, ::testing::Values(0, 1, 2, 3), family_name);

TEST(Inference, Bf16ParametersAreReadInPlace) {
  ModelConfig c = preset_config("tiny-llama");
  ModelOptions o;
  o.allocate_grads = false;
  o.param_dtype = DType::BF16;
  Transformer m(c, o);
  m.init_weights(3);
  m.set_mode(Mode::Eval);
  const int64_t T = 12, V = c.vocab_size;
  std::vector<int32_t> ids = random_tokens(T, V, 5);
  OwnedTensor full({1, T, V}, DType::F32);
  m.forward_logits(Tensor(ids.data(), {1, T}, DType::I32), full);
  InferenceEngine engine(m);
  engine.forward(std::vector<int32_t>(ids.begin(), ids.end() - 1));
  const std::vector<float> last = engine.forward(std::vector<int32_t>{ids.back()});
  EXPECT_LT(scaled_err(last.data(), full.data<float>() + (T - 1) * V, V), kLogitsTol);
}

TEST(Inference, CacheLongerThanTheContextIsBadInput) {
  auto m = make_model(preset_config("tiny-gpt2"));
  InferenceOptions io;
  io.max_seq_len = m->config().max_position_embeddings + 1;
  EXPECT_THROW(InferenceEngine(*m, io), Error);
}

// ---- sampling -------------------------------------------------------------------------

const std::vector<float> kLogits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};

std::vector<double> softmax(const std::vector<float>& l, double temperature) {
  std::vector<double> p(l.size());
  double total = 0;
  for (size_t i = 0; i < l.size(); ++i) total += p[i] = std::exp(l[i] / temperature);
  for (double& x : p) x /= total;
  return p;
}

std::vector<double> frequencies(const train::SamplingOptions& o, int draws) {
  train::SamplerScratch s;
  const Philox rng(42, 7);
  std::vector<double> f(kLogits.size(), 0.0);
  for (int i = 0; i < draws; ++i)
    f[static_cast<size_t>(train::pick_token(kLogits.data(), 6, o, rng.uniform(static_cast<uint64_t>(i)), s))] +=
        1.0 / draws;
  return f;
}

// Each frequency within 5 standard errors of its probability; zero-probability tokens never drawn.
void expect_draws_match(const std::vector<double>& expected, const train::SamplingOptions& o) {
  const int draws = 40000;
  const std::vector<double> f = frequencies(o, draws);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(f[i], 0.0) << "token " << i << " is outside the kept set";
    } else {
      const double se = std::sqrt(expected[i] * (1 - expected[i]) / draws);
      EXPECT_NEAR(f[i], expected[i], 5 * se) << "token " << i;
    }
  }
}

void expect_dist(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "token " << i;
}

TEST(Sampling, TemperatureScalesTheSoftmax) {
  for (float temp : {1.0f, 0.5f, 2.0f}) {
    train::SamplingOptions o;
    o.temperature = temp;
    const std::vector<double> want = softmax(kLogits, temp);
    expect_dist(train::sampling_distribution(kLogits.data(), 6, o), want);
    expect_draws_match(want, o);
  }
}

TEST(Sampling, TopKKeepsTheKLikeliest) {
  train::SamplingOptions o;
  o.top_k = 3;
  o.temperature = 0.5f;
  std::vector<double> want = softmax({2.0f, 1.0f, 0.5f}, 0.5);
  want.resize(6, 0.0);
  expect_dist(train::sampling_distribution(kLogits.data(), 6, o), want);
  expect_draws_match(want, o);
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingP) {
  // softmax(kLogits) = .557 .205 .124 .075 .028 .004: mass .557, .762, .886, .961, ...
  const std::vector<double> p = softmax(kLogits, 1.0);
  train::SamplingOptions o;
  o.top_p = 0.8f;  // the first three (the third crosses 0.8)
  std::vector<double> want{p[0], p[1], p[2], 0, 0, 0};
  const double mass = p[0] + p[1] + p[2];
  for (double& x : want) x /= mass;
  expect_dist(train::sampling_distribution(kLogits.data(), 6, o), want);
  expect_draws_match(want, o);
  o.top_p = 0.5f;  // the first token alone already reaches it
  expect_dist(train::sampling_distribution(kLogits.data(), 6, o), {1, 0, 0, 0, 0, 0});
  // top-k first, then top-p over the kept (renormalised) tokens, as HF applies them.
  o.top_k = 2;
  o.top_p = 0.75f;  // of {p0, p1} renormalised: .731 < .75, so both stay
  const double two = p[0] + p[1];
  expect_dist(train::sampling_distribution(kLogits.data(), 6, o), {p[0] / two, p[1] / two, 0, 0, 0, 0});
}

TEST(Sampling, GreedyTakesTheArgmaxAndBadOptionsAreBadInput) {
  train::SamplingOptions o;
  o.decoding = train::Decoding::Greedy;
  train::SamplerScratch s;
  const std::vector<float> l = {0.1f, 3.0f, -2.0f, 2.9f};
  EXPECT_EQ(train::pick_token(l.data(), 4, o, 0.99f, s), 1);
  o = {};
  o.temperature = 0.0f;
  EXPECT_EQ(train::pick_token(l.data(), 4, o, 0.99f, s), 1);
  o = {};
  o.top_p = 0.0f;
  EXPECT_THROW(train::validate(o), Error);
  o = {};
  o.top_k = -1;
  EXPECT_THROW(train::validate(o), Error);
}

// ---- generation -----------------------------------------------------------------------

std::vector<int32_t> naive_greedy(Transformer& m, std::vector<int32_t> ids, int64_t n) {
  const int64_t V = m.config().vocab_size;
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = static_cast<int64_t>(ids.size());
    OwnedTensor logits({1, T, V}, DType::F32);
    m.forward_logits(Tensor(ids.data(), {1, T}, DType::I32), logits);
    const float* last = logits.data<float>() + (T - 1) * V;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

TEST(Generate, GreedyEqualsFullRecomputeArgmax) {
  for (const char* preset : {"tiny-gpt2", "tiny-llama"}) {
    auto m = make_model(preset_config(preset), 77);
    const std::vector<int32_t> prompt = random_tokens(9, m->config().vocab_size, 3);
    InferenceEngine engine(*m);
    train::GenerateOptions o;
    o.max_new_tokens = 12;
    o.sampling.decoding = train::Decoding::Greedy;
    const train::GenerateResult r = train::generate(engine, prompt, o);
    EXPECT_EQ(r.reason, train::StopReason::MaxNewTokens);
    EXPECT_EQ(r.tokens, naive_greedy(*m, prompt, 12)) << preset;
    // The built-in run's entry point: temperature 0 is greedy, prompt + tokens.
    train::SampleOptions so;
    so.max_new_tokens = 12;
    so.temperature = 0.0f;
    std::vector<int32_t> want = prompt;
    want.insert(want.end(), r.tokens.begin(), r.tokens.end());
    EXPECT_EQ(train::sample(*m, prompt, so), want) << preset;
  }
}

// The Llama-3 shape of the HF divergence report (GQA 4/2, rope_type llama3, factor 8,
// original_max_position_embeddings 64): greedy generation through the KV cache must pick,
// at every step, the argmax of the training forward over the whole sequence (no cache),
// with prompts and generations that cross position 64 where the scaled bands differ.
TEST(Generate, GreedyLlama3RopeEqualsTrainingForwardArgmaxPastTheOriginalContext) {
  ModelConfig c = preset_config("tiny-llama");
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.rope.theta = 500000.0f;
  c.rope.scaling.type = ops::RopeScaling::Type::Llama3;
  c.rope.scaling.factor = 8.0f;
  c.rope.scaling.low_freq_factor = 1.0f;
  c.rope.scaling.high_freq_factor = 4.0f;
  c.rope.scaling.original_max_position_embeddings = 64;
  c.tie_word_embeddings = false;
  c.validate("llama3 rope");
  auto m = make_model(c, 2024);
  struct Run {
    int64_t prompt, generated;
  };
  for (const Run run : {Run{40, 40}, Run{70, 20}}) {
    const std::vector<int32_t> prompt = random_tokens(run.prompt, c.vocab_size, static_cast<uint32_t>(run.prompt));
    InferenceEngine engine(*m);
    train::GenerateOptions o;
    o.max_new_tokens = run.generated;
    o.sampling.decoding = train::Decoding::Greedy;
    const train::GenerateResult r = train::generate(engine, prompt, o);
    EXPECT_EQ(r.tokens, naive_greedy(*m, prompt, run.generated)) << "prompt of " << run.prompt << " tokens";
  }
}

TEST(Generate, SameSeedSameTokensOtherSeedOtherTokens) {
  auto m = make_model(preset_config("tiny-llama"), 5);
  InferenceEngine engine(*m);
  const std::vector<int32_t> prompt = {1, 2, 3};
  train::GenerateOptions o;
  o.max_new_tokens = 40;
  o.sampling.temperature = 1.5f;  // flat enough that seeds differ
  o.seed = 9;
  const auto a = train::generate(engine, prompt, o).tokens;
  const auto b = train::generate(engine, prompt, o).tokens;
  o.seed = 10;
  const auto c = train::generate(engine, prompt, o).tokens;
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Generate, StopsAfterAStopTokenAndWhenTheCallbackSaysSo) {
  auto m = make_model(preset_config("tiny-gpt2"), 8);
  InferenceEngine engine(*m);
  const std::vector<int32_t> prompt = {10, 20, 30};
  train::GenerateOptions o;
  o.max_new_tokens = 30;
  o.sampling.temperature = 1.0f;
  o.seed = 3;
  const auto all = train::generate(engine, prompt, o).tokens;
  ASSERT_EQ(all.size(), 30u);
  // A stop token: generation ends right after its first occurrence, the same tokens up to it.
  const int32_t eos = all[12];
  o.stop_tokens = {eos};
  const auto r = train::generate(engine, prompt, o);
  const size_t first = static_cast<size_t>(std::find(all.begin(), all.end(), eos) - all.begin());
  EXPECT_EQ(r.reason, train::StopReason::StopToken);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(all.begin(), all.begin() + first + 1));
  // Streaming: the callback sees each token as it comes; Stop ends the generation.
  o.stop_tokens.clear();
  std::vector<int32_t> streamed;
  const auto s = train::generate(engine, prompt, o, [&](int32_t t) {
    streamed.push_back(t);
    return streamed.size() == 5 ? train::StreamControl::Stop : train::StreamControl::Continue;
  });
  EXPECT_EQ(s.reason, train::StopReason::Callback);
  EXPECT_EQ(streamed, std::vector<int32_t>(all.begin(), all.begin() + 5));
  EXPECT_EQ(s.tokens, streamed);
  // A stop check (a stop signal's): asked before each token, Stop ends the generation there.
  std::vector<int64_t> asked;
  o.stop_check = [&](int64_t token) {
    asked.push_back(token);
    return token == 7 ? train::Generation::Stop : train::Generation::Continue;
  };
  const auto stopped = train::generate(engine, prompt, o);
  EXPECT_EQ(stopped.reason, train::StopReason::Stopped);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(all.begin(), all.begin() + 7));
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Generate, SlidesTheWindowWhenTheCacheIsFull) {
  auto m = make_model(preset_config("tiny-llama"), 6);
  const std::vector<int32_t> prompt = random_tokens(10, m->config().vocab_size, 4);
  train::GenerateOptions o;
  o.max_new_tokens = 30;
  o.sampling.decoding = train::Decoding::Greedy;
  InferenceEngine big(*m);
  InferenceOptions io;
  io.max_seq_len = 16;
  InferenceEngine small(*m, io);
  const auto a = train::generate(big, prompt, o).tokens;
  const auto b = train::generate(small, prompt, o).tokens;
  ASSERT_EQ(b.size(), 30u);
  // Identical while everything fits (10 prompt + 6 generated fill the 16 positions; the
  // 7th token is still chosen from a full-context forward).
  EXPECT_EQ(std::vector<int32_t>(a.begin(), a.begin() + 7), std::vector<int32_t>(b.begin(), b.begin() + 7));
}

// ---- evaluation -----------------------------------------------------------------------

TEST(Evaluate, WindowsCoverEveryTokenButTheFirstOnce) {
  auto m = make_model(preset_config("tiny-gpt2"), 21);
  const int64_t V = m->config().vocab_size, T = 16;
  const std::vector<std::vector<int32_t>> docs = {
      random_tokens(2 * T + 5, V, 1), random_tokens(7, V, 2), {5}, random_tokens(T + 1, V, 3)};
  train::EvalOptions o;
  o.seq_len = T;
  o.batch_size = 3;
  const train::EvalResult r = train::evaluate(*m, docs, o);
  EXPECT_EQ(r.tokens, (2 * T + 4) + 6 + 0 + T);
  EXPECT_EQ(r.documents, 3);
  EXPECT_EQ(r.windows, 3 + 1 + 1);

  // The same windows one by one through the loss forward.
  double sum = 0;
  int64_t count = 0;
  for (const auto& d : docs) {
    const int64_t n = static_cast<int64_t>(d.size());
    for (int64_t s = 0; s + 1 < n; s += T) {
      const int64_t len = std::min(T, n - 1 - s);
      std::vector<int32_t> in(d.begin() + s, d.begin() + s + len), tg(d.begin() + s + 1, d.begin() + s + len + 1);
      const auto res = m->forward(Tensor(in.data(), {1, len}, DType::I32), Tensor(tg.data(), {1, len}, DType::I32));
      sum += res.loss_sum;
      count += res.count;
    }
  }
  EXPECT_EQ(count, r.tokens);
  EXPECT_NEAR(r.mean_loss(), sum / static_cast<double>(count), 1e-6 * std::fabs(sum / static_cast<double>(count)));
  EXPECT_NEAR(r.perplexity(), std::exp(r.mean_loss()), 1e-9 * r.perplexity());

  EXPECT_THROW(train::evaluate(*m, {{1}, {}}, o), Error);
  o.seq_len = m->config().max_position_embeddings + 1;
  EXPECT_THROW(train::evaluate(*m, docs, o), Error);
}

TEST(Evaluate, ReadsJsonlFieldsAndWholeTextFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("zt_eval_docs_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "a.jsonl") << "{\"text\": \"one\"}\n\n{\"text\": \"two\", \"id\": 2}\n";
    std::ofstream(dir / "b.txt") << "line 1\n\nline 2\n";
    std::ofstream(dir / "bad.jsonl") << "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n";
  }
  EXPECT_EQ(train::read_text_documents((dir / "a.jsonl").string()), (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(train::read_text_documents((dir / "b.txt").string()), (std::vector<std::string>{"line 1\n\nline 2\n"}));
  try {
    train::read_text_documents((dir / "bad.jsonl").string());
    ADD_FAILURE() << "a line without the field was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--jsonl-field"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
