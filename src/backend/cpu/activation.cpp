// CPU pointwise activations, f32 (backend/activation_kernels.h; the contract in
// ops/activation.h).
//
// Accumulation rule: out, dinp, dgate, dup are overwritten (=).
// GELU is GPT-2's tanh approximation ("gelu_new"):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3),
// evaluated as x * sigmoid(2u) (the same function: 0.5 (1 + tanh(u)) = sigmoid(2u)), which
// avoids the cancellation of 1 + tanh(u) for negative x. sigmoid uses a branch-free expf
// (Cephes polynomial, about 1 ulp) that the compiler vectorises, unlike libm's expf/tanhf.
// Without -fno-trapping-math GCC keeps the float clamps as branches and vectorises nothing.
#pragma GCC optimize("no-trapping-math")

#include "backend/activation_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace zt::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;

// exp(x) for any float x; results flush to [2^-126 e^-r, e^88.7] at the extremes, which is
// all that the sigmoid below needs.
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof(scale));
  return p * scale;
}

inline float sigmoid(float z) { return 1.0f / (1.0f + exp_approx(-z)); }

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

// SwiGLU on [rows, F] matrices whose rows may be strided (ld_* = elements between rows),
// so gate and up may be the two column halves of one fused [rows, 2F] projection.
struct SwigluLayout {
  int64_t rows, F;
  int64_t ld_out, ld_gate, ld_up;    // forward: out; backward: ld_out is dout's
  int64_t ld_dgate = 0, ld_dup = 0;  // backward only
};

void gelu_forward_f32(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluC * (x + kGeluA * x * x * x);
    out[i] = x * sigmoid(2.0f * u);
  }
}

void gelu_backward_f32(float* dinp, const float* dout, const float* inp, int64_t n) {
  // d/dx [x s(2u)] = s + x s (1 - s) 2 u',  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluC * (x + kGeluA * x * x * x);
    const float s = sigmoid(2.0f * u);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
    dinp[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
  }
}

void silu_forward_f32(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x * sigmoid(x);
  }
}

void silu_backward_f32(float* dinp, const float* dout, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float s = sigmoid(x);
    dinp[i] = dout[i] * (s * (1.0f + x * (1.0f - s)));
  }
}

void swiglu_forward_f32(float* out, const float* gate, const float* up, const SwigluLayout& L) {
  const int64_t F = L.F;
#pragma omp parallel for schedule(static) if (L.rows * F > kParallelMin)
  for (int64_t r = 0; r < L.rows; ++r) {
    float* o = out + r * L.ld_out;
    const float* gr = gate + r * L.ld_gate;
    const float* ur = up + r * L.ld_up;
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) {
      const float g = gr[i];
      o[i] = g * sigmoid(g) * ur[i];
    }
  }
}

void swiglu_backward_f32(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                         const SwigluLayout& L) {
  const int64_t F = L.F;
#pragma omp parallel for schedule(static) if (L.rows * F > kParallelMin)
  for (int64_t r = 0; r < L.rows; ++r) {
    float* dg = dgate + r * L.ld_dgate;
    float* du = dup + r * L.ld_dup;
    const float* dr = dout + r * L.ld_out;
    const float* gr = gate + r * L.ld_gate;
    const float* ur = up + r * L.ld_up;
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) {
      const float g = gr[i], u = ur[i], d = dr[i];
      const float s = sigmoid(g);
      du[i] = d * (g * s);
      dg[i] = d * u * (s * (1.0f + g * (1.0f - s)));
    }
  }
}

}  // namespace

// Rows of a [..., F] view the ops layer has checked: the distance between rows.
static int64_t row_stride(const Tensor& t, int64_t F) { return t.dim() == 1 ? F : t.strides()[t.dim() - 2]; }
static const float* cf(const Tensor& t) { return static_cast<const float*>(t.data()); }
static float* mf(const Tensor& t) { return static_cast<float*>(t.data()); }

void gelu_forward(const Tensor& out, const Tensor& inp) { gelu_forward_f32(mf(out), cf(inp), inp.numel()); }
void gelu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  gelu_backward_f32(mf(dinp), cf(dout), cf(inp), inp.numel());
}
void silu_forward(const Tensor& out, const Tensor& inp) { silu_forward_f32(mf(out), cf(inp), inp.numel()); }
void silu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  silu_backward_f32(mf(dinp), cf(dout), cf(inp), inp.numel());
}
void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  swiglu_forward_f32(mf(out), cf(gate), cf(up), {rows, F, row_stride(out, F), row_stride(gate, F), row_stride(up, F)});
}
void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  const int64_t F = gate.size(-1), rows = F ? gate.numel() / F : 0;
  swiglu_backward_f32(
      mf(dgate), mf(dup), cf(dout), cf(gate), cf(up),
      {rows, F, row_stride(dout, F), row_stride(gate, F), row_stride(up, F), row_stride(dgate, F), row_stride(dup, F)});
}

}  // namespace zt::cpu
