// Building tensors from float vectors in the op gradient tests.
#pragma once
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor.h"

namespace zt::testing {

// A tensor of the given shape and dtype holding v (converted from f32); checks the sizes match.
inline OwnedTensor make(const std::vector<float>& v, Shape shape, DType dt = DType::F32) {
  OwnedTensor t(std::move(shape), dt);
  EXPECT_EQ(static_cast<size_t>(t->numel()), v.size());
  zt::convert(v.data(), DType::F32, t->data(), dt, v.size());
  return t;
}

}  // namespace zt::testing
