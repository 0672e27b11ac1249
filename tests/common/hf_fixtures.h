// The HF-made model directories of tests/data/hf (tools/make_hf_fixtures.py wrote them with
// transformers, and recorded HF's logits and greedy tokens in each expected.json): loads one
// on a device and checks zerotrain against HF's record. Used by the CPU tests
// (tests/unit/hf_fixtures_test.cpp) and the GPU ones (tests/cuda/eval_device_test.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "io/tokenizer.h"
#include "model/inference.h"
#include "model/inference_load.h"
#include "train/generate.h"

namespace zt::testing {

inline std::string hf_fixture_dir(const std::string& family) {
  return std::string(ZT_SOURCE_DIR) + "/tests/data/hf/" + family;
}

inline nlohmann::json read_hf_expected(const std::string& dir) {
  std::ifstream f(dir + "/expected.json");
  return nlohmann::json::parse(f);
}

// Prompt logits within 1e-4 of their range; greedy tokens equal HF's up to the first step
// whose top-2 margin in HF's run is below 1e-3 (a near tie: then rounding decides); the
// SentencePiece directory's tokenizer gives HF's prompt ids.
inline void expect_matches_hf_fixture(const std::string& family, Device device) {
  const std::string dir = hf_fixture_dir(family);
  const nlohmann::json want = read_hf_expected(dir);
  const std::vector<int32_t> prompt = want.at("prompt_ids").get<std::vector<int32_t>>();
  if (want.contains("prompt")) {
    const auto tok = io::load_tokenizer(dir);
    EXPECT_EQ(tok->encode(want.at("prompt").get<std::string>(), io::SpecialTokens::Add), prompt)
        << family << ": tokenizer.model vs SentencePiece's ids";
    if (want.contains("hf_prompt_ids")) {
      EXPECT_EQ(want.at("hf_prompt_ids").get<std::vector<int32_t>>(), prompt) << family << ": HF's AutoTokenizer";
    }
  }
  model::InferenceModel m = model::load_for_inference(dir, DType::F32, device);
  model::InferenceEngine engine(*m.model);
  const std::vector<float> logits = engine.forward(prompt);
  const std::vector<float> hf = want.at("last_logits").get<std::vector<float>>();
  ASSERT_EQ(logits.size(), hf.size()) << family;
  const auto [lo, hi] = std::minmax_element(hf.begin(), hf.end());
  float worst = 0.0f;
  for (size_t i = 0; i < hf.size(); ++i) worst = std::max(worst, std::fabs(logits[i] - hf[i]));
  EXPECT_LE(worst, 1e-4f * (*hi - *lo)) << family << ": prompt logits vs HF's";

  const std::vector<int32_t> hf_greedy = want.at("greedy").get<std::vector<int32_t>>();
  const std::vector<double> margins = want.at("margins").get<std::vector<double>>();
  EXPECT_EQ(hf_greedy, want.at("greedy_no_cache").get<std::vector<int32_t>>()) << family << ": HF against itself";
  size_t comparable = hf_greedy.size();
  for (size_t i = 0; i < margins.size(); ++i)
    if (margins[i] < 1e-3) {
      comparable = i + 1;
      break;
    }
  engine.reset();
  train::GenerateOptions o;
  o.max_new_tokens = static_cast<int64_t>(hf_greedy.size());
  o.sampling.decoding = train::Decoding::Greedy;  // no stop tokens: HF ran min_new_tokens
  const std::vector<int32_t> got = train::generate(engine, prompt, o).tokens;
  ASSERT_GE(got.size(), comparable) << family;
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + comparable),
            std::vector<int32_t>(hf_greedy.begin(), hf_greedy.begin() + comparable))
      << family << " on " << device.name() << " (" << comparable << " steps with HF margins >= 1e-3)";

  // With the directory's end-of-sequence ids (generation_config.json / config.json, lists
  // kept), as `zerotrain generate` stops: the same tokens up to and including the EOS.
  o.stop_tokens = m.eos_token_ids;
  const std::vector<int32_t> hf_stop = want.at("greedy_stop_at_eos").get<std::vector<int32_t>>();
  if (hf_stop.size() <= comparable) {
    EXPECT_EQ(train::generate(engine, prompt, o).tokens, hf_stop) << family << ": stopping at EOS";
  }
}

}  // namespace zt::testing
