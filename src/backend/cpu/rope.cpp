// CPU rotary position embedding.
//
// Accumulation rule: in place; the backward overwrites dqkv (=) with the transpose of the
// forward rotation. No parameters, so nothing is accumulated.
#include "backend/rope_kernels.h"

namespace zt::cpu {
namespace {

template <bool kInverse>
void rope_apply(float* qkv, int64_t B, int64_t T, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
                const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  const int64_t row_stride = (n_q_heads + 2 * n_kv_heads) * head_dim;
  const int64_t n_rot_heads = n_q_heads + n_kv_heads;
  const int64_t rows = B * T;
#pragma omp parallel for schedule(static) if (rows * n_rot_heads * head_dim > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T;
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    float* row = qkv + r * row_stride;
    for (int64_t h = 0; h < n_rot_heads; ++h) {
      float* x1 = row + h * head_dim;
      float* x2 = x1 + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i];
        const float b = x2[i];
        if (kInverse) {
          x1[i] = a * c[i] + b * s[i];
          x2[i] = b * c[i] - a * s[i];
        } else {
          x1[i] = a * c[i] - b * s[i];
          x2[i] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

}  // namespace

void rope_forward_inplace(const Tensor& qkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin,
                          int64_t start) {
  if (qkv.numel() == 0) return;
  const int64_t half = cos.size(1);
  rope_apply<false>(qkv.data_as<float>(), qkv.size(0), qkv.size(1), n_q_heads, n_kv_heads, 2 * half,
                    cos.data_as<float>() + start * half, sin.data_as<float>() + start * half);
}

void rope_backward_inplace(const Tensor& dqkv, int n_q_heads, int n_kv_heads, const Tensor& cos, const Tensor& sin,
                           int64_t start) {
  if (dqkv.numel() == 0) return;
  const int64_t half = cos.size(1);
  rope_apply<true>(dqkv.data_as<float>(), dqkv.size(0), dqkv.size(1), n_q_heads, n_kv_heads, 2 * half,
                   cos.data_as<float>() + start * half, sin.data_as<float>() + start * half);
}

}  // namespace zt::cpu
