// Causal GQA self-attention: shape/dtype checks and device dispatch.
//
// Accumulation rule: attention_forward overwrites out and lse (=); attention_backward
// overwrites the activation gradient dqkv (=). No parameters.
// qkv, out, dout, dqkv: contiguous f32; on CUDA they may also be bf16 (one activation dtype
// per call; the kernels compute in f32). lse: contiguous f32. segment_starts (packed
// samples): undefined, or contiguous i32 [B, T] on the same device.
#include "ops/attention.h"

#include "backend/attention_kernels.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace zt::ops {
namespace {

struct AttnShape {
  int64_t B, T, D;
};

// Activations are f32; the CUDA kernels also take bf16.
AttnShape check_qkv(const char* op, const Tensor& qkv, int n_q_heads, int n_kv_heads) {
  ZT_CHECK(n_q_heads > 0 && n_kv_heads > 0 && n_q_heads % n_kv_heads == 0, op,
           ": need Hq % Hkv == 0 with both positive, got Hq=", n_q_heads, " Hkv=", n_kv_heads);
  ZT_CHECK(qkv.defined() && qkv.dim() == 3, op, ": qkv must be [B, T, (Hq + 2 Hkv) * D], got ", shape_str(qkv.shape()));
  ZT_CHECK(is_activation_dtype(qkv), op, ": qkv must be f32 (or, on CUDA, bf16/f16), got ", dtype_name(qkv.dtype()));
  ZT_CHECK(qkv.is_contiguous(), op, ": qkv must be contiguous");
  const int64_t heads = n_q_heads + 2 * static_cast<int64_t>(n_kv_heads);
  ZT_CHECK(qkv.size(2) % heads == 0 && qkv.size(2) > 0, op, ": qkv last dim ", qkv.size(2),
           " is not a multiple of Hq + 2 Hkv = ", heads);
  return {qkv.size(0), qkv.size(1), qkv.size(2) / heads};
}

// An activation (or, with dtype F32, lse) of the given shape and dtype.
void check_act(const char* op, const char* what, const Tensor& t, const Shape& shape, DType dtype) {
  ZT_CHECK(t.defined() && t.shape() == shape, op, ": ", what, " must be ", shape_str(shape), ", got ",
           shape_str(t.shape()));
  ZT_CHECK(t.dtype() == dtype, op, ": ", what, " must be ", dtype_name(dtype), " (as qkv), got ",
           dtype_name(t.dtype()));
  ZT_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous");
}

// segment_starts, when defined: i32 [B, T] contiguous on the activations' device; on the host
// its values are checked too (a device copy is the caller's, built from a checked host one).
void check_segments(const char* op, const Tensor& seg, const AttnShape& s, Device dev) {
  if (!seg.has_data()) return;
  ZT_CHECK(seg.dim() == 2 && seg.size(0) == s.B && seg.size(1) == s.T, op, ": segment_starts must be [", s.B, ", ",
           s.T, "], got ", shape_str(seg.shape()));
  ZT_CHECK(seg.dtype() == DType::I32, op, ": segment_starts must be i32, got ", dtype_name(seg.dtype()));
  ZT_CHECK(seg.is_contiguous(), op, ": segment_starts must be contiguous");
  ZT_CHECK(seg.device() == dev, op, ": segment_starts must be on the activations' device");
  if (dev.is_cpu()) check_segment_starts(seg, s.B, s.T);
}

}  // namespace

void check_segment_starts(const Tensor& segment_starts, int64_t B, int64_t T) {
  const int32_t* s = segment_starts.data_as<int32_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t v = s[b * T + t];
      const bool ok = t == 0 ? v == 0 : (v == t || v == s[b * T + t - 1]);
      if (!ok)
        ZT_THROW_INPUT("segment_starts[", b, ", ", t, "] = ", v, " is not a sample start: expected ", t,
                       t == 0 ? "" : str(" or ", s[b * T + t - 1], " (the previous token's)"));
    }
}

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                       float scale, const Tensor& segment_starts) {
  const char* op = "attention_forward";
  const AttnShape s = check_qkv(op, qkv, n_q_heads, n_kv_heads);
  check_act(op, "out", out, {s.B, s.T, n_q_heads * s.D}, qkv.dtype());
  check_act(op, "lse", lse, {s.B, n_q_heads, s.T}, DType::F32);
  const Device dev = common_device(op, {&out, &lse, &qkv});
  check_segments(op, segment_starts, s, dev);
  if (qkv.numel() == 0) return;
  ZT_RUN_KERNEL(op, dev, attention_forward(out, lse, qkv, n_q_heads, n_kv_heads, scale, segment_starts));
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_q_heads, int n_kv_heads, float scale, const Tensor& segment_starts) {
  const char* op = "attention_backward";
  const AttnShape s = check_qkv(op, qkv, n_q_heads, n_kv_heads);
  check_act(op, "dqkv", dqkv, qkv.shape(), qkv.dtype());
  check_act(op, "dout", dout, {s.B, s.T, n_q_heads * s.D}, qkv.dtype());
  check_act(op, "out", out, {s.B, s.T, n_q_heads * s.D}, qkv.dtype());
  check_act(op, "lse", lse, {s.B, n_q_heads, s.T}, DType::F32);
  const Device dev = common_device(op, {&dqkv, &dout, &qkv, &out, &lse});
  check_segments(op, segment_starts, s, dev);
  if (qkv.numel() == 0) return;
  ZT_RUN_KERNEL(op, dev,
                attention_backward(dqkv, dout, qkv, out, lse, n_q_heads, n_kv_heads, scale, segment_starts));
}

}  // namespace zt::ops
