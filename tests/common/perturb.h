// Moves a model's weights off the init distribution for parity tests.
#pragma once
#include <cstdint>
#include <random>

#include "model/transformer.h"

namespace zt::testing {

// init_weights draws N(0, 0.02) weights, zero biases and unit gains: attention is then
// nearly uniform and a misplaced bias or gain changes nothing. Scale weights up and move
// biases and gains to random values so every parameter shapes the logits.
inline void perturb(model::Transformer& m, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  m.registry().for_each([&](model::Unit&, model::ParamEntry& e) {
    const Tensor rows = e.value.narrow(0, 0, e.spec.hf_shape[0]);
    for (int64_t i = 0; i < rows.numel(); ++i) {
      float v = rows.get_f32(i);
      switch (e.spec.init) {
        case model::Init::Normal:
        case model::Init::KaimingUniform:
          v *= 4.0f;
          break;
        case model::Init::Ones:
          v = 1.0f + 0.3f * u(rng);
          break;
        case model::Init::Zeros:
          v = 0.1f * u(rng);
          break;
      }
      rows.set_f32(i, v);
    }
  });
}

}  // namespace zt::testing
