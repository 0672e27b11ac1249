// Rewrites one element of one tensor of a safetensors file in place (a NaN weight, an Inf
// in a checkpoint shard): every other tensor, the dtypes and the metadata stay as they were.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace zt::testing {

// Element `at` (flat index) of tensor `name` in the file `path` becomes `value` (rounded to
// the tensor's dtype).
inline void poke_tensor(const std::string& path, const std::string& name, int64_t at, float value) {
  std::vector<OwnedTensor> copies;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
  {
    const io::SafetensorsReader in(path);
    metadata = in.metadata();
    ASSERT_TRUE(in.contains(name)) << path << " has no tensor " << name;
    copies.reserve(in.names().size());
    for (const std::string& n : in.names()) {
      const Tensor t = in.tensor(n);
      copies.emplace_back(t.shape(), t.dtype());
      copies.back()->copy_from(t);
      if (n == name) copies.back()->set_f32(at, value);
      tensors.emplace_back(n, copies.back().view());
    }
  }
  io::save_safetensors(path, tensors, metadata);
}

}  // namespace zt::testing
