// A flat optimizer range cut into segments that differ only in their weight decay: a
// unit's parameters lie one after another in its flat buffers (with alignment gaps), and
// biases and norm gains take no decay. One segmented update call covers the whole range,
// so the GPU updates a unit in one kernel launch instead of one per parameter.
#pragma once
#include <cstdint>
#include <vector>

namespace zt {

// Elements [offset, offset + length) of the range, updated with this weight decay (it
// replaces the hyper-parameters' weight_decay). A list of segments is sorted by offset and
// non-overlapping; elements in no segment (gaps) are left untouched.
struct OptimizerSegment {
  int64_t offset = 0;
  int64_t length = 0;
  float weight_decay = 0.0f;
};

using OptimizerSegments = std::vector<OptimizerSegment>;

}  // namespace zt
