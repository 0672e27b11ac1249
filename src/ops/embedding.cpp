// Tensor-level token + position embedding (see ops/embedding.h).
//
// Accumulation rule: out (=); dwte (+=), dwpe (+=).
// tokens: contiguous i32 [B, T]; wte [V, C] and wpe [P >= T, C] share one floating dtype;
// dwte/dwpe share one floating dtype (normally the weights'). out/dout: f32 [B, T, C]
// (on CUDA also bf16). Token ids are checked where they live: on the host here, on the
// device by the CUDA kernels (which report the first bad one back). gather_rows' and
// scatter_add_rows' ids are trusted and not checked at all.
#include "ops/embedding.h"

#include "backend/embedding_kernels.h"
#include "ops/dispatch.h"

namespace zt::ops {

namespace {
void check_tokens(const char* op, const Tensor& tokens) {
  ZT_CHECK(tokens.dtype() == DType::I32 && tokens.dim() == 2 && tokens.is_contiguous(), op,
           ": tokens must be a contiguous i32 [B, T] tensor, got ", dtype_name(tokens.dtype()), " ",
           shape_str(tokens.shape()));
}
// Activations are f32; CUDA kernels also take bf16.
void check_act(const char* op, const Tensor& t, int64_t B, int64_t T, int64_t C) {
  ZT_CHECK(is_activation_dtype(t) && t.is_contiguous() && t.numel() == B * T * C && t.dim() >= 1 && t.size(-1) == C, op,
           ": '", t.name(), "' must be a contiguous f32 (or, on CUDA, bf16/f16) [", B, ", ", T, ", ", C,
           "] tensor, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
}

// The BadInput error for token id `id` at flat position `pos` (the same from both backends).
[[noreturn]] void throw_bad_token(int32_t id, int64_t pos, int64_t V, const Tensor& table, const char* default_name,
                                  const char* hint) {
  ZT_THROW_INPUT("token id ", id, " at position ", pos, " is outside the vocabulary of size ", V, " (rows of ",
                 table.name().empty() ? std::string(default_name) : table.name(), ")", hint);
}
constexpr const char* kTokenizerHint = ": check that the tokenizer matches the model";
}  // namespace

void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  check_tokens("embedding_forward", tokens);
  ZT_CHECK(wte.dim() == 2 && wte.is_contiguous() && is_floating(wte.dtype()),
           "embedding_forward: wte must be a contiguous floating [V, C] tensor, got ", shape_str(wte.shape()));
  const int64_t B = tokens.size(0), T = tokens.size(1), V = wte.size(0), C = wte.size(1);
  check_act("embedding_forward", out, B, T, C);
  const bool has_wpe = wpe.has_data();
  if (has_wpe) {
    ZT_CHECK(
        wpe.dim() == 2 && wpe.is_contiguous() && wpe.size(1) == C && wpe.size(0) >= T && wpe.dtype() == wte.dtype(),
        "embedding_forward: wpe must be a contiguous [>= ", T, ", ", C, "] tensor of wte's dtype, got ",
        dtype_name(wpe.dtype()), " ", shape_str(wpe.shape()));
  }
  const Device dev = common_device("embedding_forward", {&out, &tokens, &wte, &wpe});
  const TokenCheck bad = ZT_RUN_KERNEL("embedding_forward", dev, embedding_forward(out, tokens, wte, wpe));
  if (bad.position >= 0) throw_bad_token(bad.id, bad.position, V, wte, "wte", kTokenizerHint);
}

void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  check_tokens("embedding_backward", tokens);
  const bool has_wte = dwte.has_data(), has_wpe = dwpe.has_data();
  if (!has_wte && !has_wpe) return;
  const Tensor& ref = has_wte ? dwte : dwpe;
  ZT_CHECK(ref.dim() == 2 && is_floating(ref.dtype()), "embedding_backward: gradients must be floating 2-D, got ",
           shape_str(ref.shape()));
  const int64_t B = tokens.size(0), T = tokens.size(1), C = ref.size(1);
  check_act("embedding_backward", dout, B, T, C);
  if (has_wte) {
    ZT_CHECK(dwte.dim() == 2 && dwte.is_contiguous() && dwte.size(1) == C,
             "embedding_backward: dwte must be a contiguous [V, ", C, "] tensor, got ", shape_str(dwte.shape()));
  }
  if (has_wpe) {
    ZT_CHECK(dwpe.dim() == 2 && dwpe.is_contiguous() && dwpe.size(1) == C && dwpe.size(0) >= T &&
                 dwpe.dtype() == ref.dtype(),
             "embedding_backward: dwpe must be a contiguous [>= ", T, ", ", C, "] tensor of dwte's dtype, got ",
             dtype_name(dwpe.dtype()), " ", shape_str(dwpe.shape()));
  }
  const Device dev = common_device("embedding_backward", {&dwte, &dwpe, &dout, &tokens});
  const TokenCheck bad = ZT_RUN_KERNEL("embedding_backward", dev, embedding_backward(dwte, dwpe, dout, tokens));
  if (bad.position >= 0) throw_bad_token(bad.id, bad.position, dwte.size(0), dwte, "dwte", "");
}

// Only what the host already knows is checked (dtypes, shapes, devices): the ids' values
// live on the device and are trusted (see embedding.h).
void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids) {
  ZT_CHECK(ids.dtype() == DType::I32 && ids.is_contiguous(), "gather_rows: ids must be a contiguous i32 tensor, got ",
           dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  ZT_CHECK(table.dim() == 2 && table.is_contiguous() && is_floating(table.dtype()),
           "gather_rows: table must be a contiguous floating [R, C] tensor, got ", dtype_name(table.dtype()), " ",
           shape_str(table.shape()));
  const int64_t N = ids.numel(), C = table.size(1);
  ZT_CHECK(
      is_activation_dtype(out) && out.is_contiguous() && out.dim() >= 1 && out.size(-1) == C && out.numel() == N * C,
      "gather_rows: out must be a contiguous f32 (or, on CUDA, bf16/f16) tensor of ", N, " rows of ", C, ", got ",
      dtype_name(out.dtype()), " ", shape_str(out.shape()));
  if (N == 0 || C == 0) return;
  const Device dev = common_device("gather_rows", {&out, &table, &ids});
  ZT_RUN_KERNEL("gather_rows", dev, gather_rows(out, table, ids));
}

// As gather_rows: host-known facts only (dtypes, shapes, devices); the ids are trusted.
void scatter_add_rows(const Tensor& dtable, const Tensor& rows, const Tensor& ids) {
  ZT_CHECK(ids.dtype() == DType::I32 && ids.is_contiguous(),
           "scatter_add_rows: ids must be a contiguous i32 tensor, got ", dtype_name(ids.dtype()), " ",
           shape_str(ids.shape()));
  ZT_CHECK(dtable.dim() == 2 && dtable.is_contiguous() && is_floating(dtable.dtype()),
           "scatter_add_rows: dtable must be a contiguous floating [R, C] tensor, got ", dtype_name(dtable.dtype()),
           " ", shape_str(dtable.shape()));
  const int64_t N = ids.numel(), C = dtable.size(1);
  ZT_CHECK(is_activation_dtype(rows) && rows.is_contiguous() && rows.dim() >= 1 && rows.size(-1) == C &&
               rows.numel() == N * C,
           "scatter_add_rows: rows must be a contiguous f32 (or, on CUDA, bf16/f16) tensor of ", N, " rows of ", C,
           ", got ", dtype_name(rows.dtype()), " ", shape_str(rows.shape()));
  if (N == 0 || C == 0) return;
  const Device dev = common_device("scatter_add_rows", {&dtable, &rows, &ids});
  ZT_RUN_KERNEL("scatter_add_rows", dev, scatter_add_rows(dtable, rows, ids));
}

}  // namespace zt::ops
