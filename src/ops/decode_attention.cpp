// KV-cache attention: shape/dtype checks and device dispatch (see decode_attention.h).
//
// Accumulation rule: kv_cache_write overwrites the cache rows it writes; the forward
// overwrites out (=). Inference only: no backward, no parameters.
#include "ops/decode_attention.h"

#include "backend/decode_attention_kernels.h"
#include "core/error.h"
#include "ops/dispatch.h"

namespace zt::ops {
namespace {

struct DecodeShape {
  int64_t B, Tn, D, S;
};

DecodeShape check_args(const char* op, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache, int n_q_heads,
                       int n_kv_heads, int64_t start) {
  ZT_CHECK(n_q_heads > 0 && n_kv_heads > 0 && n_q_heads % n_kv_heads == 0, op,
           ": need Hq % Hkv == 0 with both positive, got Hq=", n_q_heads, " Hkv=", n_kv_heads);
  ZT_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.dtype() == DType::F32 && qkv.is_contiguous(), op,
           ": qkv must be contiguous f32 [B, Tn, (Hq + 2 Hkv) * D], got ", dtype_name(qkv.dtype()), " ",
           shape_str(qkv.shape()));
  const int64_t heads = n_q_heads + 2 * static_cast<int64_t>(n_kv_heads);
  ZT_CHECK(qkv.size(2) > 0 && qkv.size(2) % heads == 0, op, ": qkv last dim ", qkv.size(2),
           " is not a multiple of Hq + 2 Hkv = ", heads);
  const int64_t B = qkv.size(0), Tn = qkv.size(1), D = qkv.size(2) / heads;
  for (const Tensor* c : {&k_cache, &v_cache}) {
    ZT_CHECK(c->defined() && c->dim() == 4 && c->dtype() == DType::F32 && c->is_contiguous(), op,
             ": caches must be contiguous f32 [B, Hkv, S, D], got ", shape_str(c->shape()));
    ZT_CHECK(c->size(0) == B && c->size(1) == n_kv_heads && c->size(3) == D, op, ": cache shape ",
             shape_str(c->shape()), " does not match B=", B, " Hkv=", n_kv_heads, " D=", D);
  }
  ZT_CHECK(k_cache.shape() == v_cache.shape(), op, ": k and v caches differ in shape");
  const int64_t S = k_cache.size(2);
  ZT_CHECK(start >= 0 && start + Tn <= S, op, ": positions ", start, "..", start + Tn - 1, " do not fit a cache of ", S,
           " tokens");
  return {B, Tn, D, S};
}

}  // namespace

void kv_cache_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int n_q_heads, int n_kv_heads,
                    int64_t start) {
  const char* op = "kv_cache_write";
  check_args(op, qkv, k_cache, v_cache, n_q_heads, n_kv_heads, start);
  const Device dev = common_device(op, {&k_cache, &v_cache, &qkv});
  if (qkv.numel() == 0) return;
  ZT_RUN_KERNEL(op, dev, kv_cache_write(k_cache, v_cache, qkv, n_q_heads, n_kv_heads, start));
}

void decode_attention_forward(const Tensor& out, const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                              int n_q_heads, int n_kv_heads, int64_t start, float scale) {
  const char* op = "decode_attention_forward";
  const DecodeShape s = check_args(op, qkv, k_cache, v_cache, n_q_heads, n_kv_heads, start);
  const Shape want{s.B, s.Tn, n_q_heads * s.D};
  ZT_CHECK(out.defined() && out.shape() == want && out.dtype() == DType::F32 && out.is_contiguous(), op,
           ": out must be contiguous f32 ", shape_str(want), ", got ", shape_str(out.shape()));
  const Device dev = common_device(op, {&out, &k_cache, &v_cache, &qkv});
  if (qkv.numel() == 0) return;
  ZT_RUN_KERNEL(op, dev, decode_attention_forward(out, qkv, k_cache, v_cache, n_q_heads, n_kv_heads, start, scale));
}

}  // namespace zt::ops
