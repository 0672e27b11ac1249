// Tensor-level LayerNorm and RMSNorm (see ops/norm.h).
//
// Accumulation rule: out, mean, rstd (=); dinp (= or +=, GradWrite); dweight, dbias (+=).
// inp/out/dout/dinp: contiguous f32 with last dimension C (rows N = numel / C); on CUDA
// they may also be bf16 (one activation dtype per call; the kernels compute in f32).
// weight/bias: contiguous [C], one floating dtype. dweight/dbias: contiguous [C], one
// floating dtype (normally the weight's). mean/rstd: contiguous f32 [N].
#include "ops/norm.h"

#include "backend/norm_kernels.h"
#include "ops/elementwise.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {

// Activations are f32; CUDA kernels also take bf16.
int64_t rows_of(const char* op, const Tensor& t, int64_t C) {
  ZT_CHECK(is_activation_dtype(t) && t.is_contiguous() && t.dim() >= 1 && t.size(-1) == C, op, ": '", t.name(),
           "' must be a contiguous f32 (or, on CUDA, bf16/f16) tensor with last dimension ", C, ", got ",
           dtype_name(t.dtype()), " ", shape_str(t.shape()));
  return C ? t.numel() / C : 0;
}
void check_param(const char* op, const Tensor& p, int64_t C) {
  ZT_CHECK(is_floating(p.dtype()) && p.is_contiguous() && p.numel() == C, op, ": parameter '", p.name(),
           "' must be a contiguous floating [", C, "] tensor, got ", dtype_name(p.dtype()), " ", shape_str(p.shape()));
}
void check_stat(const char* op, const Tensor& s, int64_t N) {
  ZT_CHECK(s.dtype() == DType::F32 && s.is_contiguous() && s.numel() == N, op, ": statistic '", s.name(),
           "' must be a contiguous f32 [", N, "] tensor, got ", dtype_name(s.dtype()), " ", shape_str(s.shape()));
}

struct Rows {
  int64_t N = 0, C = 0;
};

// The checks of a norm forward (shapes, dtypes, statistics); op names the caller.
Rows check_layernorm_forward(const char* op, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                             const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const int64_t C = weight.numel();
  check_param(op, weight, C);
  const int64_t N = rows_of(op, inp, C);
  ZT_CHECK(rows_of(op, out, C) == N, op, ": out and inp differ in rows");
  ZT_CHECK(out.dtype() == inp.dtype(), op, ": out and inp dtypes differ");
  if (bias.has_data()) {
    check_param(op, bias, C);
    ZT_CHECK(bias.dtype() == weight.dtype(), op, ": bias and weight dtypes differ");
  }
  if (mean.has_data()) check_stat(op, mean, N);
  if (rstd.has_data()) check_stat(op, rstd, N);
  return {N, C};
}
Rows check_rmsnorm_forward(const char* op, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                           const Tensor& weight) {
  return check_layernorm_forward(op, out, Tensor{}, rstd, inp, weight, Tensor{});
}
}  // namespace

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps) {
  check_layernorm_forward("layernorm_forward", out, mean, rstd, inp, weight, bias);
  const Device dev = common_device("layernorm_forward", {&out, &mean, &rstd, &inp, &weight, &bias});
  ZT_RUN_KERNEL("layernorm_forward", dev, layernorm_forward(out, mean, rstd, inp, weight, bias, eps));
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                        GradWrite dinp_write) {
  const int64_t C = weight.numel();
  check_param("layernorm_backward", weight, C);
  const int64_t N = rows_of("layernorm_backward", dout, C);
  ZT_CHECK(rows_of("layernorm_backward", inp, C) == N, "layernorm_backward: inp and dout differ in rows");
  if (dinp.has_data()) ZT_CHECK(rows_of("layernorm_backward", dinp, C) == N, "layernorm_backward: dinp rows");
  ZT_CHECK(inp.dtype() == dout.dtype() && (!dinp.has_data() || dinp.dtype() == dout.dtype()),
           "layernorm_backward: dout, inp and dinp dtypes differ");
  check_stat("layernorm_backward", mean, N);
  check_stat("layernorm_backward", rstd, N);
  if (dweight.has_data()) check_param("layernorm_backward", dweight, C);
  if (dbias.has_data()) check_param("layernorm_backward", dbias, C);
  if (dweight.has_data() && dbias.has_data()) {
    ZT_CHECK(dweight.dtype() == dbias.dtype(), "layernorm_backward: dweight and dbias dtypes differ");
  }
  ZT_CHECK(dinp_write == GradWrite::Overwrite || !dinp.has_data() || dinp.data() != dout.data(),
           "layernorm_backward: an accumulated dinp may not alias dout");
  const Device dev = common_device("layernorm_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd});
  ZT_RUN_KERNEL("layernorm_backward", dev,
                layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dinp_write));
}

namespace {
// The checks of the fused add + norm beyond those of ops::add and the norm itself.
Device check_add_norm(const char* op, const Tensor& res, const Tensor& out, const Tensor& a, const Tensor& b) {
  ZT_CHECK(a.numel() == res.numel() && b.numel() == res.numel() && a.dtype() == res.dtype() &&
               b.dtype() == res.dtype() && a.is_contiguous() && b.is_contiguous(),
           op, ": res, a and b must be contiguous with one shape and dtype, got ", shape_str(res.shape()), " ",
           dtype_name(res.dtype()), ", ", shape_str(a.shape()), " ", dtype_name(a.dtype()), ", ", shape_str(b.shape()),
           " ", dtype_name(b.dtype()));
  ZT_CHECK(out.data() != res.data() && out.data() != a.data() && out.data() != b.data(), op,
           ": out may not alias res, a or b");
  return common_device(op, {&res, &out, &a, &b});
}
}  // namespace

void add_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& a, const Tensor& b, const Tensor& weight, const Tensor& bias, float eps) {
  const Device dev = check_add_norm("add_layernorm_forward", res, out, a, b);
  if (dev.is_cuda()) {
    check_layernorm_forward("add_layernorm_forward", out, mean, rstd, res, weight, bias);
    common_device("add_layernorm_forward", {&res, &out, &mean, &rstd, &a, &b, &weight, &bias});
    cuda::add_layernorm_forward(res, out, mean, rstd, a, b, weight, bias, eps);
    return;
  }
  add(res, a, b);
  layernorm_forward(out, mean, rstd, res, weight, bias, eps);
}

void add_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd, const Tensor& a, const Tensor& b,
                         const Tensor& weight, float eps) {
  const Device dev = check_add_norm("add_rmsnorm_forward", res, out, a, b);
  if (dev.is_cuda()) {
    check_rmsnorm_forward("add_rmsnorm_forward", out, rstd, res, weight);
    common_device("add_rmsnorm_forward", {&res, &out, &rstd, &a, &b, &weight});
    cuda::add_rmsnorm_forward(res, out, rstd, a, b, weight, eps);
    return;
  }
  add(res, a, b);
  rmsnorm_forward(out, rstd, res, weight, eps);
}

void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  check_rmsnorm_forward("rmsnorm_forward", out, rstd, inp, weight);
  const Device dev = common_device("rmsnorm_forward", {&out, &rstd, &inp, &weight});
  ZT_RUN_KERNEL("rmsnorm_forward", dev, rmsnorm_forward(out, rstd, inp, weight, eps));
}

void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd, GradWrite dinp_write) {
  const int64_t C = weight.numel();
  check_param("rmsnorm_backward", weight, C);
  const int64_t N = rows_of("rmsnorm_backward", dout, C);
  ZT_CHECK(rows_of("rmsnorm_backward", inp, C) == N, "rmsnorm_backward: inp and dout differ in rows");
  if (dinp.has_data()) ZT_CHECK(rows_of("rmsnorm_backward", dinp, C) == N, "rmsnorm_backward: dinp rows");
  ZT_CHECK(inp.dtype() == dout.dtype() && (!dinp.has_data() || dinp.dtype() == dout.dtype()),
           "rmsnorm_backward: dout, inp and dinp dtypes differ");
  check_stat("rmsnorm_backward", rstd, N);
  if (dweight.has_data()) check_param("rmsnorm_backward", dweight, C);
  ZT_CHECK(dinp_write == GradWrite::Overwrite || !dinp.has_data() || dinp.data() != dout.data(),
           "rmsnorm_backward: an accumulated dinp may not alias dout");
  const Device dev = common_device("rmsnorm_backward", {&dinp, &dweight, &dout, &inp, &weight, &rstd});
  ZT_RUN_KERNEL("rmsnorm_backward", dev, rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, dinp_write));
}

}  // namespace zt::ops
