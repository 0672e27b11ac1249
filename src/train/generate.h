// Autoregressive sampling: temperature and top-k over the model's logits.
#pragma once
#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace zt::train {

struct SampleOptions {
  int64_t max_new_tokens = 100;
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: whole vocabulary
  uint64_t seed = 0;
  int64_t stop_token = -1;   // stop after emitting this id (e.g. EOS); -1: never
};

// Returns prompt + generated ids. The context is cropped to the model's last
// max_position_embeddings tokens.
std::vector<int32_t> sample(model::Transformer& model, std::vector<int32_t> prompt, const SampleOptions& options);

}  // namespace zt::train
