// RoPE for tokens that do not start at position 0: a KV-cache decode step runs the new
// tokens at absolute positions start .. start+T-1 (rope.h's op always starts at 0).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/rope.h"

namespace zt::ops {

// qkv: [B, T, (Hq + 2 Hkv) * D]; rotates the q and k heads of row (b, t) by position
// start + t, exactly as rope_forward_inplace rotates position start + t of a longer
// sequence (same table rows, so cached and full-sequence runs agree bit for bit).
// Needs start + T <= table.max_positions.
void rope_forward_inplace_at(const Tensor& qkv, int n_q_heads, int n_kv_heads, const RopeTable& table, int64_t start);

}  // namespace zt::ops
