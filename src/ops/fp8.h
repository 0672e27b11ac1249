// FP8 storage conversions (core/fp8.h's E4M3 and E5M2) with a per-tensor scale, and the
// per-tensor amax that FP8 recipes derive their scales from (Transformer Engine's
// delayed and current scaling, torchao's float8 linears):
//   scale = fp8_max / amax (or a history of amaxes); q = fp8(x * scale); x ~ q * (1/scale).
// The scale is a tensor of one f32 element on the data's device, so a GPU recipe computes
// and uses it without a host wait.
//
// Accumulation rule: every output is overwritten (=). Tensors are contiguous; in- and
// output have the same element count; 16-bit and f32 sides may be f32, bf16 or f16 on
// either device. CPU and CUDA results are bitwise equal (one f32 multiply, then the shared
// bit code of core/fp8.h; f16 outputs of a NaN may differ in the NaN's payload only).
#pragma once
#include "core/tensor.h"

namespace zt::ops {

// out (F8E4M3 or F8E5M2) = fp8(inp * scale[0]), rounded to nearest even; a product beyond
// the format's range (an infinity included) becomes its largest finite value under
// Saturation::Saturate, NaN (E4M3) or infinity (E5M2) under NonSaturating (torch's cast).
// NaN stays NaN.
void fp8_quantize(const Tensor& out, const Tensor& inp, const Tensor& scale, Saturation saturation);

// out (f32, bf16 or f16) = float(inp) * scale[0], rounded once to out's dtype.
void fp8_dequantize(const Tensor& out, const Tensor& inp, const Tensor& scale);

// out[0] (one f32 element) = max |inp[i]| over inp (f32, bf16 or f16): 0 for an empty
// tensor, infinity if an element is infinite, NaN if an element is NaN (a recipe must not
// scale by it silently).
void amax(const Tensor& out, const Tensor& inp);

}  // namespace zt::ops
