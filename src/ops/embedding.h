// Token embedding plus optional learned absolute positions (GPT-2's wte + wpe), and the
// unchecked row gather of internal position ids.
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

}  // namespace zt::ops
