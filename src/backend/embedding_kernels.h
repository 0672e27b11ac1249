// Token + position embedding kernels of both backends, behind ops/embedding.h:
// backend/cpu/embedding.cpp and backend/cuda/embedding.cu. No CUDA types here.
//
// Same meaning, shapes and accumulation rule as the ops:: functions of the same name:
// out (=); dwte (+=), dwpe (+=). The wrapper has checked shapes and devices. tokens: i32
// [B, T] on the tensors' device; wte/wpe and dwte/dwpe: f32, bf16 or f16; out/dout: f32
// (CUDA: or bf16/f16; sums in f32, one rounding per output element).
//
// Both backends check the token ids before they write anything and return the first bad one
// (the wrapper turns it into the BadInput error). CUDA: the ids live on the device, so they
// are checked there: a kernel records the first
// position whose id is outside [0, V) and the call reads that one value back (a stream
// synchronisation: one tiny host wait per call, the price of BadInput naming the id; the
// wrapper turns a bad result into the same error as the CPU path). Nothing is written to
// dwte/dwpe when an id is bad; out's rows for bad ids are left unwritten.
//
// gather_rows (out (=) table[ids], ids i32 of N elements) is the exception: its ids are
// trusted (internal position ids), so neither backend reports a bad one and the CUDA
// kernel has no flag and no host wait. A bad id's row is left unwritten, never read.
// scatter_add_rows (dtable[ids[i]] (+=) rows[i], its mirror for the backward) likewise:
// embedding_backward's dwte code without the check (the same grouped, deterministic sums);
// a bad id's row is skipped, nothing is written outside dtable.
#pragma once
#include <cstdint>

#include "backend/kernel_list.h"
#include "core/tensor.h"

namespace zt {
// The first out-of-range token id found, if any.
struct TokenCheck {
  int64_t position = -1;  // flat index into tokens; -1: every id is in range (or none was checked)
  int32_t id = 0;         // tokens[position]
};
}  // namespace zt

// embedding_backward: dwte (dwpe) is checked (written) only when defined. Deterministic: the same bits on every
// run (see embedding.cu).
#define ZT_EMBEDDING_KERNELS(K)                                                                                     \
  K(TokenCheck, embedding_forward, (const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe)) \
  K(TokenCheck, embedding_backward,                                                                                 \
    (const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens))                             \
  K(void, gather_rows, (const Tensor& out, const Tensor& table, const Tensor& ids))                                 \
  K(void, scatter_add_rows, (const Tensor& dtable, const Tensor& rows, const Tensor& ids))

namespace zt::cpu {
ZT_EMBEDDING_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cpu

namespace zt::cuda {
ZT_EMBEDDING_KERNELS(ZT_DECLARE_KERNEL)
}  // namespace zt::cuda
