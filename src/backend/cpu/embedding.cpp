// CPU token + position embedding and the trusted row gather / scatter-add (see
// backend/embedding_kernels.h).
//
// Accumulation rule: out (=); dwte (+=), dwpe (+=); scatter_add_rows: dtable (+=).
// Backward's dwte (and scatter_add_rows, the same code) groups the rows by token (a stable
// sort of the row indices), sums each group in f32 in row order and adds the sum to dwte's
// row once: no races, no atomics, the same bits for any thread count, and a single rounding
// per call for bf16/f16 gradients.
#include "backend/embedding_kernels.h"

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/cpu/elementwise.h"
#include "core/dtype_dispatch.h"

namespace zt::cpu {
namespace {

TokenCheck find_bad_token(const int32_t* tokens, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= V) return {i, tokens[i]};
  return {};
}

// row (f32) = w (W) or row += w.
template <class W, bool kAdd>
inline void load_row(float* row, const W* w, int64_t C) {
  if constexpr (std::is_same_v<W, float>) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] = kAdd ? row[c] + w[c] : w[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] = kAdd ? row[c] + load_f32(w[c]) : load_f32(w[c]);
  }
}
template <class W>
void embedding_forward_f32(float* out, const int32_t* tokens, const W* wte, const W* wpe, int64_t B, int64_t T,
                           int64_t C) {
  const int64_t N = B * T;
#pragma omp parallel for schedule(static) if (N * C > (1 << 15))
  for (int64_t i = 0; i < N; ++i) {
    float* row = out + i * C;
    load_row<W, false>(row, wte + static_cast<int64_t>(tokens[i]) * C, C);
    if (wpe) load_row<W, true>(row, wpe + (i % T) * C, C);
  }
}

// out row i = table row ids[i]; an id outside [0, R) leaves its row unwritten (the ids are
// trusted: see gather_rows in embedding_kernels.h).
template <class W>
void gather_rows_f32(float* out, const W* table, const int32_t* ids, int64_t N, int64_t R, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > (1 << 15))
  for (int64_t i = 0; i < N; ++i)
    if (ids[i] >= 0 && ids[i] < R) load_row<W, false>(out + i * C, table + static_cast<int64_t>(ids[i]) * C, C);
}

// dst[ids[i]] += src[i] for N rows of C: the rows are grouped by id (a stable sort of the
// row indices), each group is summed in f32 in row order and added to dst's row once. Ids
// outside [0, R) are skipped (embedding_backward has checked them all; scatter_add_rows'
// ids are trusted, and a bad one must not write outside dst).
template <class G>
void scatter_add_rows_f32(G* dst, const float* src, const int32_t* ids, int64_t N, int64_t R, int64_t C) {
  if (N == 0 || C == 0) return;
  // Row indices sorted by id; group g spans order[starts[g] .. starts[g+1]).
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  std::vector<int64_t> starts;
  starts.reserve(static_cast<size_t>(N) + 1);
  for (int64_t k = 0; k < N; ++k)
    if (k == 0 || ids[order[k]] != ids[order[k - 1]]) starts.push_back(k);
  starts.push_back(N);
  const int64_t groups = static_cast<int64_t>(starts.size()) - 1;
#pragma omp parallel if (N * C > (1 << 15))
  {
    std::vector<float> acc(static_cast<size_t>(C));
#pragma omp for schedule(dynamic, 16)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = starts[static_cast<size_t>(g)], k1 = starts[static_cast<size_t>(g) + 1];
      const int32_t id = ids[order[static_cast<size_t>(k0)]];
      if (id < 0 || id >= R) continue;
      float* a = acc.data();
      const float* first = src + order[static_cast<size_t>(k0)] * C;
      std::copy(first, first + C, a);
      for (int64_t k = k0 + 1; k < k1; ++k) {
        const float* r = src + order[static_cast<size_t>(k)] * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) a[c] += r[c];
      }
      accumulate_f32(dst + static_cast<int64_t>(id) * C, a, C);
    }
  }
}

template <class G>
void embedding_backward_f32(G* dwte, int64_t V, G* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                            int64_t C) {
  const int64_t N = B * T;
  if (N == 0 || C == 0) return;
  if (dwte) scatter_add_rows_f32(dwte, dout, tokens, N, V, C);
  if (dwpe) {
#pragma omp parallel if (T * C > (1 << 15))
    {
      std::vector<float> acc(static_cast<size_t>(C));
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        float* a = acc.data();
        std::copy(dout + t * C, dout + t * C + C, a);
        for (int64_t b = 1; b < B; ++b) {
          const float* r = dout + (b * T + t) * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) a[c] += r[c];
        }
        G* dst = dwpe + t * C;
        accumulate_f32(dst, a, C);
      }
    }
  }
}

}  // namespace

TokenCheck embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const int64_t B = tokens.size(0), T = tokens.size(1), V = wte.size(0), C = wte.size(1);
  const int32_t* tok = static_cast<const int32_t*>(tokens.data());
  const TokenCheck bad = find_bad_token(tok, B * T, V);
  if (bad.position >= 0) return bad;
  dispatch_float(wte.dtype(), [&](auto tag) {
    using W = decltype(tag);
    embedding_forward_f32(static_cast<float*>(out.data()), tok, static_cast<const W*>(wte.data()),
                          wpe.storage_as<const W>(), B, T, C);
  });
  return {};
}

void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids) {
  dispatch_float(table.dtype(), [&](auto tag) {
    using W = decltype(tag);
    gather_rows_f32(static_cast<float*>(out.data()), static_cast<const W*>(table.data()),
                    static_cast<const int32_t*>(ids.data()), ids.numel(), table.size(0), table.size(1));
  });
}

TokenCheck embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const bool has_wte = dwte.has_data(), has_wpe = dwpe.has_data();
  const Tensor& ref = has_wte ? dwte : dwpe;
  const int64_t B = tokens.size(0), T = tokens.size(1), C = ref.size(1);
  const int32_t* tok = static_cast<const int32_t*>(tokens.data());
  if (has_wte) {
    const TokenCheck bad = find_bad_token(tok, B * T, dwte.size(0));
    if (bad.position >= 0) return bad;
  }
  dispatch_float(ref.dtype(), [&](auto tag) {
    using G = decltype(tag);
    embedding_backward_f32(has_wte ? static_cast<G*>(dwte.data()) : nullptr, has_wte ? dwte.size(0) : 0,
                           has_wpe ? static_cast<G*>(dwpe.data()) : nullptr, static_cast<const float*>(dout.data()),
                           tok, B, T, C);
  });
  return {};
}

// The same grouped sum as embedding_backward's dwte (the same bits as a checked call with
// these ids as tokens), minus the check.
void scatter_add_rows(const Tensor& dtable, const Tensor& rows, const Tensor& ids) {
  dispatch_float(dtable.dtype(), [&](auto tag) {
    using G = decltype(tag);
    scatter_add_rows_f32(static_cast<G*>(dtable.data()), static_cast<const float*>(rows.data()),
                         static_cast<const int32_t*>(ids.data()), ids.numel(), dtable.size(0), dtable.size(1));
  });
}

}  // namespace zt::cpu
