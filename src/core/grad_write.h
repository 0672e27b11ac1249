// How a kernel writes a gradient output.
#pragma once
#include <cstdint>

namespace zt {

// Overwrite: out = g. Accumulate: out = out + g, added in f32 and rounded once to out's
// dtype (the bits of writing g to a scratch tensor and then adding it, for f32 outputs; one
// rounding fewer for 16-bit ones). Fusing the add into the kernel that makes g saves a
// write and a read of g and of out (the residual stream's gradient in the backward).
enum class GradWrite : uint8_t { Overwrite, Accumulate };

}  // namespace zt
