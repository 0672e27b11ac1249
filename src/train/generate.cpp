#include "train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace zt::train {

std::vector<int32_t> sample(model::Transformer& model, std::vector<int32_t> ids, const SampleOptions& opt) {
  const auto& c = model.config();
  const int64_t V = c.vocab_size;
  if (ids.empty()) ids.push_back(static_cast<int32_t>(std::max<int64_t>(c.bos_token_id, 0)));
  model.set_mode(model::Mode::Eval);
  const Philox rng(opt.seed, 0x5A3B1E);
  std::vector<float> probs(static_cast<size_t>(V));
  std::vector<int32_t> order(static_cast<size_t>(V));
  for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), c.max_position_embeddings);
    std::vector<int32_t> ctx(ids.end() - T, ids.end());
    const Tensor tokens(ctx.data(), {1, T}, DType::I32);
    OwnedTensor logits({1, T, V}, DType::F32);
    model.forward_logits(tokens, logits);
    const float* last = logits.data<float>() + (T - 1) * V;
    int32_t next = 0;
    if (opt.temperature <= 0.0f) {
      next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int64_t k = opt.top_k > 0 ? std::min<int64_t>(opt.top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return last[a] > last[b]; });
      const float mx = last[order[0]];
      double total = 0;
      for (int64_t i = 0; i < k; ++i) {
        probs[static_cast<size_t>(i)] = std::exp((last[order[static_cast<size_t>(i)]] - mx) / opt.temperature);
        total += probs[static_cast<size_t>(i)];
      }
      double u = rng.uniform(static_cast<uint64_t>(step)) * total;
      next = order[static_cast<size_t>(k - 1)];
      for (int64_t i = 0; i < k; ++i) {
        u -= probs[static_cast<size_t>(i)];
        if (u <= 0) {
          next = order[static_cast<size_t>(i)];
          break;
        }
      }
    }
    ids.push_back(next);
    if (opt.stop_token >= 0 && next == opt.stop_token) break;
  }
  model.set_mode(model::Mode::Train);
  return ids;
}

}  // namespace zt::train
