// zerotrain on HF-made directories (tests/data/hf, written by transformers 5.17 through
// tools/make_hf_fixtures.py): prompt logits and greedy tokens equal HF's, on the CPU, for
// GPT-2, Llama-3 (GQA 4/2, llama3 RoPE past its original context of 64), Qwen2 (q/k/v
// biases) and Llama-2 (SentencePiece tokenizer.model). The GPU runs the same checks in
// tests/cuda/eval_device_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "common/hf_fixtures.h"

namespace {

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, GreedyTokensAndLogitsEqualHfs) {
  zt::testing::expect_matches_hf_fixture(GetParam(), zt::Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(Families, HfFixture, ::testing::Values("gpt2", "llama3", "qwen2", "llama2"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
