// Checks of ops::gemm's operands (ops/gemm.h), then the backend's kernel.
#include "ops/gemm.h"

#include "ops/dispatch.h"

namespace zt::ops {
namespace {

// A matrix operand: 2-D, floating, unit column stride, row stride >= columns.
void check_matrix(const char* role, const Tensor& t) {
  ZT_CHECK(t.defined() && t.dim() == 2, "gemm: ", role, " '", t.name(), "' must be a 2-D tensor, got ",
           t.defined() ? shape_str(t.shape()) : std::string("an undefined tensor"));
  ZT_CHECK(is_floating(t.dtype()), "gemm: ", role, " '", t.name(), "' must be floating, got ", dtype_name(t.dtype()));
  ZT_CHECK((t.strides()[1] == 1 || t.size(1) <= 1) && t.strides()[0] >= t.size(1), "gemm: ", role, " '", t.name(),
           "' must have unit column stride and a row stride >= its ", t.size(1), " columns, got strides ",
           shape_str(t.strides()));
}

int64_t op_rows(const Tensor& t, Transpose tr) { return tr == Transpose::Yes ? t.size(1) : t.size(0); }
int64_t op_cols(const Tensor& t, Transpose tr) { return tr == Transpose::Yes ? t.size(0) : t.size(1); }

}  // namespace

void gemm(const Tensor& out, const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, float alpha,
          GradWrite write) {
  check_matrix("out", out);
  check_matrix("a", a);
  check_matrix("b", b);
  const int64_t M = op_rows(a, ta), K = op_cols(a, ta), N = op_cols(b, tb);
  ZT_CHECK(op_rows(b, tb) == K, "gemm: inner dimensions differ: op(a) is [", M, ", ", K, "], op(b) is [",
           op_rows(b, tb), ", ", N, "]");
  ZT_CHECK(out.size(0) == M && out.size(1) == N, "gemm: out is ", shape_str(out.shape()), ", the product is [", M, ", ",
           N, "]");
  if (M == 0 || N == 0) return;
  const Device dev = common_device("gemm", {&out, &a, &b});
  ZT_RUN_KERNEL("gemm", dev, gemm(out, a, ta, b, tb, alpha, write));
}

}  // namespace zt::ops
