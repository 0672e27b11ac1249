// What PEFT computed for an adapter of tests/data/peft (tools/make_peft_fixtures.py): the ids
// of its text and merge_and_unload()'s logits on them, compared with a model's logits within
// 1e-5 of their range.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/transformer.h"

namespace zt::testing {

struct PeftReference {
  std::vector<float> ids, logits;
  float tolerance = 0;  // 1e-5 of the logits' range
  std::string text;
  explicit PeftReference(const std::string& adapter) {
    const io::SafetensorsReader ref(adapter + "/reference.safetensors");
    ids = ref.tensor("input_ids").to_f32_vector();
    logits = ref.tensor("logits").to_f32_vector();
    text = ref.metadata().at("text");
    const auto [lo, hi] = std::minmax_element(logits.begin(), logits.end());
    tolerance = 1e-5f * (*hi - *lo);
  }
  // max |have - PEFT's| over the logits.
  float worst_diff(const std::vector<float>& have) const {
    EXPECT_EQ(have.size(), logits.size());
    float worst = 0;
    for (size_t i = 0; i < std::min(have.size(), logits.size()); ++i)
      worst = std::max(worst, std::fabs(have[i] - logits[i]));
    return worst;
  }
  // The model's f32 logits on the reference's ids (evaluation mode).
  std::vector<float> logits_of(model::Transformer& m) const {
    const int64_t T = static_cast<int64_t>(ids.size()), V = m.config().vocab_size;
    std::vector<int32_t> tokens(ids.begin(), ids.end());
    OwnedTensor out({1, T, V}, DType::F32);
    m.set_mode(model::Mode::Eval);
    m.forward_logits(Tensor(tokens.data(), {1, T}, DType::I32), out);
    return out->to_f32_vector();
  }
};

}  // namespace zt::testing
