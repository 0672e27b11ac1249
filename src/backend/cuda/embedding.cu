// CUDA token + position embedding and the trusted row gather / scatter-add (see
// backend/embedding_kernels.h).
//
// Accumulation rule: out (=); dwte (+=), dwpe (+=); scatter_add_rows: dtable (+=).
//
// Forward: one thread per 8 channels of one output row (16-byte loads/stores when C % 8 == 0
// and the pointers are aligned; one channel per thread otherwise), grid-stride. The same
// kernel checks the row's token id and records the first bad position with atomicMin.
//
// Backward, dwte (deterministic, the same bits on every run and the same order of sums as
// the CPU backend): the rows are grouped by token with a stable radix sort of
// (token, row index) pairs (CUB, on the compute stream, scratch from the caching
// allocator); then one block per sorted position that starts a group sums the group's
// dout rows in ascending row order in f32 and adds the sum to dwte's row once (one
// rounding for bf16/f16 gradients). Blocks at other positions return at once. No atomics
// on the gradient. Cost: a token that occurs k times is summed serially by one block
// (k row reads per channel); with normal text k is small, but a batch that is mostly one
// token (padding) makes that block the long pole. A two-level split of long groups would
// fix that if it ever matters.
// Backward, dwpe: one thread per (position, 8 channels) sums the B rows in batch order.
// When an id is bad (checked before anything is written), neither gradient is touched:
// the gradient kernels read the device flag and return.
// scatter_add_rows is the dwte path with no flag (trusted ids: nothing to read back, no host
// wait), so it is deterministic and sums exactly as dwte does. Its sort keys are the ids with
// any bad one (a caller's bug) replaced by R, the table's rows: bad rows sort after every valid
// group, cannot split one, and the group kernel skips keys >= R (nothing written outside).
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/device/element_vec.cuh"
#include "backend/cuda/device/host_dispatch.cuh"
#include "backend/embedding_kernels.h"
#include "core/allocator.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

constexpr int kThreads = 256;       // grid-stride kernels
constexpr int kGroupThreads = 128;  // threads per block of the dwte group kernel
constexpr int kVec = 8;             // channels per thread on the vector path
constexpr unsigned long long kNoBadToken = ~0ull;

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---- kernels ------------------------------------------------------------------------

// out[i, c..c+V) = wte[tokens[i], ...] (+ wpe[i % T, ...]); a bad id records i in first_bad
// (the smallest such i wins; no record when first_bad is null: gather_rows' trusted ids)
// and leaves the row unwritten.
template <int V, class A, class W>
__global__ void embedding_forward_kernel(A* __restrict__ out, const int32_t* __restrict__ tokens,
                                         const W* __restrict__ wte, const W* __restrict__ wpe, int64_t N, int64_t T,
                                         int C, int64_t vocab, unsigned long long* __restrict__ first_bad) {
  const int chunks = C / V;
  const int64_t total = N * chunks;
  for (int64_t e = thread_index(); e < total; e += grid_stride()) {
    const int64_t i = e / chunks;
    const int c = static_cast<int>(e - i * chunks) * V;
    const int32_t tok = tokens[i];
    if (tok < 0 || tok >= vocab) {
      if (first_bad && c == 0) atomicMin(first_bad, static_cast<unsigned long long>(i));
      continue;
    }
    float v[V];
    load_vec<V>(wte + static_cast<int64_t>(tok) * C + c, v);
    if (wpe) {
      float p[V];
      load_vec<V>(wpe + (i % T) * C + c, p);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += p[k];
    }
    store_vec<V>(out + i * C + c, v);
  }
}

// rows[i] = i (the sort's values). Checked (first_bad set): the first bad id's position into
// first_bad. Trusted (keys set): keys[i] = the id, or vocab for a bad one.
__global__ void check_and_index_kernel(const int32_t* __restrict__ tokens, int64_t N, int64_t vocab,
                                       int32_t* __restrict__ rows, unsigned long long* __restrict__ first_bad,
                                       uint32_t* __restrict__ keys) {
  for (int64_t i = thread_index(); i < N; i += grid_stride()) {
    rows[i] = static_cast<int32_t>(i);
    const int32_t tok = tokens[i];
    const bool bad = tok < 0 || tok >= vocab;
    if (bad && first_bad) atomicMin(first_bad, static_cast<unsigned long long>(i));
    if (keys) keys[i] = bad ? static_cast<uint32_t>(vocab) : static_cast<uint32_t>(tok);
  }
}

// Block (k, channel block): when sorted position k starts a group of equal tokens, sums the
// group's dout rows (ascending row order: the sort is stable) and adds the sum to dwte.
// first_bad is null for scatter_add_rows' trusted ids; keys >= vocab (its bad ids) are skipped.
template <int V, class A, class G>
__global__ void embedding_wte_grad_kernel(G* __restrict__ dwte, const A* __restrict__ dout,
                                          const uint32_t* __restrict__ keys, const int32_t* __restrict__ rows, int N,
                                          int C, int64_t vocab, const unsigned long long* __restrict__ first_bad) {
  if (first_bad && *first_bad != kNoBadToken) return;
  const int k = blockIdx.x;
  const uint32_t tok = keys[k];
  if (tok >= vocab) return;                 // a trusted id outside the table
  if (k > 0 && keys[k - 1] == tok) return;  // not the first of its group
  const int c = (blockIdx.y * kGroupThreads + threadIdx.x) * V;
  if (c >= C) return;
  float acc[V];
  load_vec<V>(dout + static_cast<int64_t>(rows[k]) * C + c, acc);
  for (int j = k + 1; j < N && keys[j] == tok; ++j) {
    float v[V];
    load_vec<V>(dout + static_cast<int64_t>(rows[j]) * C + c, v);
#pragma unroll
    for (int q = 0; q < V; ++q) acc[q] += v[q];
  }
  G* dst = dwte + static_cast<int64_t>(tok) * C + c;
  float g[V];
  load_vec<V>(dst, g);
#pragma unroll
  for (int q = 0; q < V; ++q) g[q] += acc[q];
  store_vec<V>(dst, g);
}

// dwpe[t, c..c+V) += sum over b (in order) of dout[b, t, ...]. first_bad may be null.
template <int V, class A, class G>
__global__ void embedding_wpe_grad_kernel(G* __restrict__ dwpe, const A* __restrict__ dout, int64_t B, int64_t T, int C,
                                          const unsigned long long* __restrict__ first_bad) {
  if (first_bad && *first_bad != kNoBadToken) return;
  const int chunks = C / V;
  const int64_t total = T * chunks;
  for (int64_t e = thread_index(); e < total; e += grid_stride()) {
    const int64_t t = e / chunks;
    const int c = static_cast<int>(e - t * chunks) * V;
    float acc[V];
    load_vec<V>(dout + t * C + c, acc);
    for (int64_t b = 1; b < B; ++b) {
      float v[V];
      load_vec<V>(dout + (b * T + t) * C + c, v);
#pragma unroll
      for (int q = 0; q < V; ++q) acc[q] += v[q];
    }
    G* dst = dwpe + t * C + c;
    float g[V];
    load_vec<V>(dst, g);
#pragma unroll
    for (int q = 0; q < V; ++q) g[q] += acc[q];
    store_vec<V>(dst, g);
  }
}

// ---- host side ----------------------------------------------------------------------

// A device flag for the first bad token position, set to "none".
Buffer make_flag(cudaStream_t stream) {
  Buffer flag(sizeof(unsigned long long), Device::cuda());
  ZT_CUDA_CHECK(cudaMemsetAsync(flag.data(), 0xff, sizeof(unsigned long long), stream));  // kNoBadToken
  return flag;
}

// Reads the flag back (waits for the stream: the one host sync of the op) and, when an id
// was bad, the id itself.
TokenCheck read_flag(const Buffer& flag, const int32_t* tokens, cudaStream_t stream) {
  unsigned long long first = kNoBadToken;
  ZT_CUDA_CHECK(cudaMemcpyAsync(&first, flag.data(), sizeof first, cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  TokenCheck check;
  if (first == kNoBadToken) return check;
  check.position = static_cast<int64_t>(first);
  ZT_CUDA_CHECK(cudaMemcpyAsync(&check.id, tokens + first, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return check;
}

int checked_channels(const char* op, int64_t C) {
  ZT_CHECK(C <= INT_MAX, op, ": C = ", C, " is too large for the CUDA kernels");
  return static_cast<int>(C);
}

// Bits of the sort key: enough for ids in [0, vocab).
int key_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

// Queues embedding_forward_kernel for N rows (wpe and first_bad may be null).
void launch_forward(const Tensor& out, const int32_t* tok, const Tensor& wte, const Tensor& wpe, int64_t N, int64_t T,
                    int C, unsigned long long* first_bad, cudaStream_t stream) {
  const int64_t vocab = wte.size(0);
  dispatch_activation("cuda embedding", out.dtype(), [&](auto at) {
    dispatch_param(wte.dtype(), [&](auto wt) {
      using A = typename decltype(at)::type;
      using W = typename decltype(wt)::type;
      A* y = out.storage_as<A>();
      const W* te = wte.storage_as<const W>();
      const W* pe = wpe.storage_as<const W>();
      const bool vec = C % kVec == 0 && aligned16(y) && aligned16(te) && aligned16(pe);
      if (vec) {
        embedding_forward_kernel<kVec><<<grid_stride_blocks(N * (C / kVec), kThreads), kThreads, 0, stream>>>(
            y, tok, te, pe, N, T, C, vocab, first_bad);
      } else {
        embedding_forward_kernel<1>
            <<<grid_stride_blocks(N * C, kThreads), kThreads, 0, stream>>>(y, tok, te, pe, N, T, C, vocab, first_bad);
      }
      ZT_CUDA_CHECK_LAST();
    });
  });
}

// first_bad null: scatter_add_rows' trusted ids (no check; bad ids sort last and are skipped).
template <class A, class G>
void wte_grad(G* dwte, const A* dout, const int32_t* tokens, int64_t vocab, int N, int C, unsigned long long* first_bad,
              cudaStream_t stream) {
  // Sort (token, row) pairs by token. Checked: the ids are read as unsigned keys (valid ids
  // are non-negative; with a bad id the order is meaningless, but then nothing is written).
  // Trusted: keys made by check_and_index_kernel, a bad id as vocab (one more key value).
  const bool trusted = first_bad == nullptr;
  Buffer rows_in(static_cast<size_t>(N) * sizeof(int32_t), Device::cuda());
  Buffer rows_out(static_cast<size_t>(N) * sizeof(int32_t), Device::cuda());
  Buffer keys_out(static_cast<size_t>(N) * sizeof(uint32_t), Device::cuda());
  Buffer keys_in = trusted ? Buffer(static_cast<size_t>(N) * sizeof(uint32_t), Device::cuda()) : Buffer();
  int32_t* rin = static_cast<int32_t*>(rows_in.data());
  int32_t* rout = static_cast<int32_t*>(rows_out.data());
  uint32_t* kout = static_cast<uint32_t*>(keys_out.data());
  uint32_t* kmade = static_cast<uint32_t*>(keys_in.data());
  const uint32_t* kin = trusted ? kmade : reinterpret_cast<const uint32_t*>(tokens);

  check_and_index_kernel<<<grid_stride_blocks(N, kThreads), kThreads, 0, stream>>>(tokens, N, vocab, rin, first_bad,
                                                                                   kmade);
  ZT_CUDA_CHECK_LAST();

  const int end_bit = key_bits(trusted ? vocab + 1 : vocab);
  size_t temp_bytes = 0;
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, kin, kout, rin, rout, N, 0, end_bit, stream));
  // Never a null pointer: CUB would take that for another size query.
  Buffer temp(std::max<size_t>(temp_bytes, 16), Device::cuda());
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, kin, kout, rin, rout, N, 0, end_bit, stream));

  const bool vec = C % kVec == 0 && aligned16(dwte) && aligned16(dout);
  const int per_thread = vec ? kVec : 1;
  const unsigned channel_blocks =
      static_cast<unsigned>((C + kGroupThreads * per_thread - 1) / (kGroupThreads * per_thread));
  const dim3 grid(static_cast<unsigned>(N), channel_blocks);
  if (vec) {
    embedding_wte_grad_kernel<kVec><<<grid, kGroupThreads, 0, stream>>>(dwte, dout, kout, rout, N, C, vocab, first_bad);
  } else {
    embedding_wte_grad_kernel<1><<<grid, kGroupThreads, 0, stream>>>(dwte, dout, kout, rout, N, C, vocab, first_bad);
  }
  ZT_CUDA_CHECK_LAST();
  // The scratch buffers go back to the stream-ordered cache: safe without a sync.
}

template <class A, class G>
void wpe_grad(G* dwpe, const A* dout, int64_t B, int64_t T, int C, const unsigned long long* first_bad,
              cudaStream_t stream) {
  const bool vec = C % kVec == 0 && aligned16(dwpe) && aligned16(dout);
  if (vec) {
    embedding_wpe_grad_kernel<kVec>
        <<<grid_stride_blocks(T * (C / kVec), kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T, C, first_bad);
  } else {
    embedding_wpe_grad_kernel<1>
        <<<grid_stride_blocks(T * C, kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T, C, first_bad);
  }
  ZT_CUDA_CHECK_LAST();
}

}  // namespace

TokenCheck embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const int64_t B = tokens.size(0), T = tokens.size(1), N = B * T;
  const int C = checked_channels("cuda::embedding_forward", wte.size(1));
  if (N == 0 || C == 0) return {};
  cudaStream_t stream = compute_stream();
  const int32_t* tok = tokens.storage_as<const int32_t>();
  Buffer flag = make_flag(stream);
  launch_forward(out, tok, wte, wpe, N, T, C, static_cast<unsigned long long*>(flag.data()), stream);
  return read_flag(flag, tok, stream);
}

// The forward kernel without wpe and without a flag: nothing to read back, no host wait.
void gather_rows(const Tensor& out, const Tensor& table, const Tensor& ids) {
  const int64_t N = ids.numel();
  const int C = checked_channels("cuda::gather_rows", table.size(1));
  if (N == 0 || C == 0) return;
  launch_forward(out, ids.storage_as<const int32_t>(), table, Tensor(), N, /*T (wpe's period, unused)=*/1, C,
                 /*first_bad=*/nullptr, compute_stream());
}

TokenCheck embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const bool has_wte = dwte.has_data(), has_wpe = dwpe.has_data();
  if (!has_wte && !has_wpe) return {};
  const Tensor& ref = has_wte ? dwte : dwpe;
  const int64_t B = tokens.size(0), T = tokens.size(1), N = B * T;
  const int C = checked_channels("cuda::embedding_backward", ref.size(1));
  if (N == 0 || C == 0) return {};
  ZT_CHECK(N <= INT_MAX, "cuda::embedding_backward: ", N, " tokens is too many for one call (at most ", INT_MAX, ")");
  cudaStream_t stream = compute_stream();
  const int32_t* tok = tokens.storage_as<const int32_t>();
  // The flag exists only when dwte is updated: like the CPU path, ids are checked against
  // dwte's rows and not at all for dwpe alone.
  Buffer flag = has_wte ? make_flag(stream) : Buffer();
  unsigned long long* first_bad = static_cast<unsigned long long*>(flag.data());
  dispatch_activation("cuda embedding", dout.dtype(), [&](auto at) {
    dispatch_param(ref.dtype(), [&](auto gt) {
      using A = typename decltype(at)::type;
      using G = typename decltype(gt)::type;
      const A* d = dout.storage_as<const A>();
      if (has_wte) wte_grad(dwte.storage_as<G>(), d, tok, dwte.size(0), static_cast<int>(N), C, first_bad, stream);
      if (has_wpe) wpe_grad(dwpe.storage_as<G>(), d, B, T, C, first_bad, stream);
    });
  });
  return has_wte ? read_flag(flag, tok, stream) : TokenCheck{};
}

// The dwte path of embedding_backward with no flag: nothing to read back, no host wait; the
// same deterministic grouped sums (see the top of this file).
void scatter_add_rows(const Tensor& dtable, const Tensor& rows, const Tensor& ids) {
  const int64_t N = ids.numel();
  const int C = checked_channels("cuda::scatter_add_rows", dtable.size(1));
  if (N == 0 || C == 0) return;
  ZT_CHECK(N <= INT_MAX, "cuda::scatter_add_rows: ", N, " ids is too many for one call (at most ", INT_MAX, ")");
  const int64_t R = dtable.size(0);
  ZT_CHECK(R < (int64_t{1} << 32) - 1, "cuda::scatter_add_rows: ", R, " rows is too many for 32-bit sort keys");
  cudaStream_t stream = compute_stream();
  dispatch_activation("cuda embedding", rows.dtype(), [&](auto at) {
    dispatch_param(dtable.dtype(), [&](auto gt) {
      using A = typename decltype(at)::type;
      using G = typename decltype(gt)::type;
      wte_grad(dtable.storage_as<G>(), rows.storage_as<const A>(), ids.storage_as<const int32_t>(), R,
               static_cast<int>(N), C, /*first_bad=*/nullptr, stream);
    });
  });
}

}  // namespace zt::cuda
