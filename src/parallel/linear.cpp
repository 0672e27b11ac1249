// The parallel linear (see linear.h): the base GEMM through ops::linear_*, the LoRA
// adapters through ops::gemm, and the tensor-parallel collectives only where a group of
// more than one rank asks for them (so a single rank runs exactly today's calls).
#include "parallel/linear.h"

#include "core/error.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/linear.h"

namespace zt::parallel {
namespace {

// A group of more than one rank for tensors on x's device; null otherwise.
comm::Communicator* active(const Group& group, const Tensor& x) {
  comm::Communicator* c = group.for_tensors_on(x.device());
  return c != nullptr && c->size() > 1 ? c : nullptr;
}

void all_reduce_sum(comm::Communicator* c, const Tensor& t) {
  if (c != nullptr && t.has_data()) c->all_reduce(t, comm::ReduceOp::Sum);
}

void check_recipe(const Linear& l) {
  if (l.precision != Precision::Activations)
    ZT_THROW_UNSUPPORTED("linear precision recipe '", precision_name(l.precision),
                         "' is not implemented yet; the linears run in the activations' dtype "
                         "(recipe 'activations')");
}

Tensor cut(const Tensor& flat, Shape shape) { return flat.narrow(0, 0, shape_numel(shape)).reshape(std::move(shape)); }

// t as [rows, cols], and an adapter's column window of the linear's output (or its gradient):
// the products read or add to it in place, so nothing of the output's full width is staged.
Tensor as_rows(const Tensor& t, int64_t cols) { return t.reshape({t.numel() / cols, cols}); }
Tensor adapter_columns(const Tensor& y, const LoraAdapter& ad, int64_t width) {
  return as_rows(y, width).narrow(1, ad.col_begin, ad.cols);
}
int64_t output_width(const Tensor& y, const Tensor& x, const LoraAdapter& ad) {
  return y.numel() / (x.numel() / ad.in_features);
}

// The adapter's input: x, or dropout(x) in the scratch.
Tensor adapter_input(const LinearLora& lora, const LoraAdapter& ad, const Tensor& x) {
  if (lora.dropout <= 0.0f) return x;
  const Tensor xd = cut(lora.scratch.xd, x.shape());
  ops::dropout_forward(xd, x, lora.dropout, ad.dropout_rng);
  return xd;
}

}  // namespace

const char* linear_kind_name(LinearKind kind) {
  switch (kind) {
    case LinearKind::Replicated:
      return "replicated";
    case LinearKind::Column:
      return "column";
    case LinearKind::Row:
      return "row";
  }
  return "?";
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::Activations:
      return "activations";
    case Precision::Fp8Tensorwise:
      return "fp8-tensorwise";
  }
  return "?";
}

// Per adapter: h = dropout(x) A^T, then y's columns += scaling * h B^T, the scaling in the
// product's alpha (one rounding) and the sum in place (beta = 1) on the adapter's column
// window. Row: h is this rank's partial sum, added into y's partial before y's all-reduce.
void lora_forward(const LinearLora& lora, LinearKind, const Group&, const Tensor& x, const Tensor& y) {
  for (const LoraAdapter& ad : lora.adapters) {
    const Tensor in = as_rows(adapter_input(lora, ad, x), ad.in_features);
    const Tensor h = cut(lora.scratch.h, {in.size(0), lora.r});
    ops::gemm(h, in, Transpose::No, ad.a, Transpose::Yes);
    ops::gemm(adapter_columns(y, ad, output_width(y, x, ad)), h, Transpose::No, ad.b, Transpose::Yes, lora.scaling,
              GradWrite::Accumulate);
  }
}

// With s = scaling and x' = dropout(x), from dy (the adapter's columns read in place):
//   h = x' A^T (recomputed: same mask, same bits as the forward; Row: all-reduced)
//   dB += s dy^T h        dh = s dy B (Column: all-reduced)        dA += dh^T x'
//   dx += d(x') = dh A    (through the dropout's backward when there is one)
void lora_backward(const LinearLora& lora, LinearKind kind, const Group& group, const Tensor& x, const Tensor& dy,
                   const Tensor& dx) {
  comm::Communicator* tp = active(group, x);
  const float s = lora.scaling, p = lora.dropout;
  for (const LoraAdapter& ad : lora.adapters) {
    ZT_CHECK(ad.da.has_data() && ad.db.has_data(), "lora backward of ", ad.name, " without gradients");
    const Tensor in = as_rows(adapter_input(lora, ad, x), ad.in_features);
    const int64_t N = in.size(0);
    const Tensor h = cut(lora.scratch.h, {N, lora.r});
    ops::gemm(h, in, Transpose::No, ad.a, Transpose::Yes);
    if (kind == LinearKind::Row) all_reduce_sum(tp, h);
    const Tensor dy_cols = adapter_columns(dy, ad, output_width(dy, x, ad));
    ops::gemm(ad.db, dy_cols, Transpose::Yes, h, Transpose::No, s, GradWrite::Accumulate);
    const Tensor dh = cut(lora.scratch.dh, {N, lora.r});
    ops::gemm(dh, dy_cols, Transpose::No, ad.b, Transpose::No, s);
    if (kind == LinearKind::Column) all_reduce_sum(tp, dh);
    ops::gemm(ad.da, dh, Transpose::Yes, in, Transpose::No, 1.0f, GradWrite::Accumulate);
    if (!dx.has_data()) continue;
    if (p <= 0.0f) {
      ops::gemm(as_rows(dx, ad.in_features), dh, Transpose::No, ad.a, Transpose::No, 1.0f, GradWrite::Accumulate);
      continue;
    }
    const Tensor dxd = cut(lora.scratch.dxd, {N, ad.in_features});
    ops::gemm(dxd, dh, Transpose::No, ad.a, Transpose::No);
    ops::dropout_backward(dxd, dxd, p, ad.dropout_rng);
    ops::add_inplace(as_rows(dx, ad.in_features), dxd);
  }
  // The held copies packed in this linear's bias (its gradient is written by now): no
  // gradient, so the optimizer leaves them at the base's values.
  for (const Tensor& g : lora.held_grads) g.zero();
}

void linear_forward(const Linear& l, const Tensor& y, const Tensor& x) {
  check_recipe(l);
  comm::Communicator* tp = l.kind == LinearKind::Row ? active(l.group, x) : nullptr;
  // Row over several ranks: the bias once (rank 0), into the partial sums.
  const bool bias_here = tp == nullptr || tp->rank() == 0;
  ops::linear_forward(y, x, l.weight, bias_here ? l.bias : Tensor(), l.layout);
  if (l.lora != nullptr) lora_forward(*l.lora, l.kind, l.group, x, y);
  all_reduce_sum(tp, y);
}

void linear_backward(const Linear& l, const LinearGrads& g, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_recipe(l);
  ops::linear_backward(dx, g.weight, g.bias, dy, x, l.weight, l.layout);
  // Column: x was replicated, so its gradient is the sum of every rank's share (the adapters'
  // share below is whole already: their dh is all-reduced).
  if (l.kind == LinearKind::Column) all_reduce_sum(active(l.group, x), dx);
  if (l.lora != nullptr) lora_backward(*l.lora, l.kind, l.group, x, dy, dx);
}

}  // namespace zt::parallel
