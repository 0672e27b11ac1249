// CPU token + position embedding on raw pointers.
//
// Accumulation rule: out (=); dwte (+=), dwpe (+=). Gradient rows are summed in f32 in a
// fixed order (rows of one token in ascending position order) and added to the stored
// gradient with one rounding per call, so results do not depend on the thread count.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace zt::cpu {

// Index of the first token outside [0, V), or -1 when all are valid.
int64_t find_bad_token(const int32_t* tokens, int64_t n, int64_t V);

// out[B*T, C] = wte[tokens] (+ wpe[t]); wpe may be null. Tokens must be valid.
template <class W>
void embedding_forward(float* out, const int32_t* tokens, const W* wte, const W* wpe, int64_t B, int64_t T,
                       int64_t C);

// dwte[tokens[i]] += dout[i] (dwte may be null); dwpe[t] += sum_b dout[b, t] (may be null).
template <class G>
void embedding_backward(G* dwte, G* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                        int64_t C);

}  // namespace zt::cpu
