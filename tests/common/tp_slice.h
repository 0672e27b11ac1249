// Tensor-parallel shards cut from whole f32 host tensors (model/weights.h's
// tensor_parallel_shard coordinates), the reference the parallel layer's and the HF slice
// loader's tests compare against.
#pragma once
#include <cstring>
#include <vector>

#include "backend/weight_layout.h"
#include "core/tensor.h"
#include "model/weights.h"

namespace zt::testing {

inline int64_t shard_rows(const model::TensorParallelShard& s) {
  int64_t n = 0;
  for (const model::RowSpan& r : s.rows) n += r.size();
  return n;
}

// The shard of `w` (f32, host; stored in `layout`, a vector when 1-D), stored the same way.
inline OwnedTensor take_shard(const Tensor& w, WeightLayout layout, const model::TensorParallelShard& s) {
  const Tensor src32 = w;
  const float* src = src32.data_as<float>();
  const int64_t rows = shard_rows(s);
  if (w.dim() == 1) {
    OwnedTensor out({rows}, DType::F32);
    int64_t at = 0;
    for (const model::RowSpan& r : s.rows)
      for (int64_t i = r.begin; i < r.end; ++i) out.data<float>()[at++] = src[i];
    return out;
  }
  const int64_t cols = s.cols.size(), ld = w.size(1);
  if (layout == WeightLayout::OutIn) {  // [O, I]
    OwnedTensor out({rows, cols}, DType::F32);
    int64_t at = 0;
    for (const model::RowSpan& r : s.rows)
      for (int64_t i = r.begin; i < r.end; ++i, ++at)
        std::memcpy(out.data<float>() + at * cols, src + i * ld + s.cols.begin, sizeof(float) * cols);
    return out;
  }
  // InOut (GPT-2's Conv1D): [I, O], the logical rows are columns.
  OwnedTensor out({cols, rows}, DType::F32);
  for (int64_t i = 0; i < cols; ++i) {
    int64_t at = 0;
    for (const model::RowSpan& r : s.rows)
      for (int64_t o = r.begin; o < r.end; ++o) out.data<float>()[i * rows + at++] = src[(s.cols.begin + i) * ld + o];
  }
  return out;
}

}  // namespace zt::testing
