// Token embedding plus optional learned absolute positions (GPT-2's wte + wpe), and the
// unchecked row gather / scatter-add of internal position ids.
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// out[B, T, C] = wte[tokens[b, t]] (+ wpe[t]).  tokens: i32 [B, T]; wpe may be undefined.
// A token id outside [0, rows of wte) is bad input: throws BadInput naming the id.
void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);

// dwte[tokens[b,t]] += dout[b,t];  dwpe[t] += sum_b dout[b,t] (when dwpe is defined).
void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens);

// out[i] (=) table[ids[i]]: a row gather by ids the caller made itself (packed samples'
// position ids, derived from segment starts checked on the host), so the ids are trusted:
// not checked against the table's rows, and on CUDA nothing waits for the device
// (embedding_forward's check costs a stream synchronisation per call). ids: contiguous i32
// of any shape, N elements; table: contiguous floating [R, C]; out: contiguous [..., C] with
// N * C elements, f32 (CUDA: or bf16/f16), on the ids' device. An id outside [0, R) is the
// caller's bug: both backends leave its row unwritten (never read outside the table) and
// report nothing.
void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids);

// dtable[ids[i]] += rows[i]: gather_rows' mirror for the backward (the packed path's dwpe by
// position id), with trusted ids for the same reason: not checked against dtable's rows, and
// on CUDA nothing waits for the device (embedding_backward's check of dwte's ids costs a
// stream synchronisation per call). ids: contiguous i32 of any shape, N elements (CUDA: at
// most 2^31 - 1); dtable: contiguous floating [R, C]; rows: contiguous [..., C] with N * C
// elements, f32 (CUDA: or bf16/f16), on the ids' device. The sums are embedding_backward's
// dwte sums (rows of one id added in f32 in ascending i, then one add into dtable's row):
// deterministic, and the same bits as embedding_backward(dtable, {}, rows, ids) (ids as
// [B, T] tokens) on both backends. An id outside [0, R) is the caller's bug: its rows are
// dropped (nothing is written outside dtable) and nothing is reported.
void scatter_add_rows(const Tensor& dtable, const Tensor& rows, const Tensor& ids);

}  // namespace zt::ops
