// RoPE at a position offset: checks, then the CPU or CUDA rope kernel on the table rows
// from `start` on (the kernel reads row t of the table pointers it is given).
//
// Accumulation rule: in place on activations; no parameters, no backward (inference only).
// qkv is f32 (on CUDA also bf16).
#include "ops/rope_offset.h"

#include "backend/rope_kernels.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace zt::ops {

void rope_forward_inplace_at(const Tensor& qkv, int n_q_heads, int n_kv_heads, const RopeTable& table, int64_t start) {
  const char* op = "rope_forward_inplace_at";
  ZT_CHECK(qkv.defined() && qkv.dim() == 3, op, ": qkv must be [B, T, (Hq + 2 Hkv) * D], got ", shape_str(qkv.shape()));
  ZT_CHECK(is_activation_dtype(qkv) && qkv.is_contiguous(), op, ": qkv must be contiguous f32 (or, on CUDA, bf16/f16)");
  ZT_CHECK(n_q_heads > 0 && n_kv_heads > 0, op, ": head counts must be positive");
  ZT_CHECK(table.head_dim > 0 && table.head_dim % 2 == 0, op, ": bad rope table head_dim ", table.head_dim);
  ZT_CHECK(qkv.size(2) == static_cast<int64_t>(n_q_heads + 2 * n_kv_heads) * table.head_dim, op, ": qkv last dim ",
           qkv.size(2), " != (Hq + 2 Hkv) * D");
  ZT_CHECK(start >= 0 && start + qkv.size(1) <= table.max_positions, op, ": positions ", start, "..",
           start + qkv.size(1) - 1, " exceed the rope table's ", table.max_positions, " positions");
  const Device dev = common_device(op, {&qkv, &table.cos.view(), &table.sin.view()});
  ZT_RUN_KERNEL(op, dev, rope_forward_inplace(qkv, n_q_heads, n_kv_heads, table.cos, table.sin, start));
}

}  // namespace zt::ops
