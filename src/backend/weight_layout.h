// How a linear layer's weight matrix is stored. PyTorch's nn.Linear keeps [out, in];
// GPT-2's Conv1D keeps [in, out]. Kernels take either, so HF files load without a
// transpose (a straight copy, or a zero-copy view of the mapped file).
#pragma once

namespace zt {

enum class WeightLayout {
  OutIn,  // [out_features, in_features]: y = x W^T
  InOut,  // [in_features, out_features]: y = x W
};

}  // namespace zt
