// Building tensors from float vectors (and id lists) in the op tests.
#pragma once
#include <algorithm>
#include <cstdint>
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

// An i32 tensor of the given shape holding ids (token or row ids); checks the sizes match.
inline OwnedTensor make_ids(const std::vector<int32_t>& ids, Shape shape) {
  OwnedTensor t(std::move(shape), DType::I32);
  EXPECT_EQ(static_cast<size_t>(t->numel()), ids.size());
  std::copy(ids.begin(), ids.end(), t->data_as<int32_t>());
  return t;
}

}  // namespace zt::testing
