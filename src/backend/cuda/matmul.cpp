// cuBLASLt row-major products; see matmul.h for the row-major <-> column-major mapping.
//
// Each call builds its descriptors (cheap host calls) and takes the algorithm from
// cublasLtMatmulAlgoGetHeuristic, cached per problem: the key holds everything the
// heuristic sees (dtypes, transposes, sizes, leading dimensions, pointer alignments,
// epilogue), so a cached algorithm is the one the heuristic would return again.
//
// Autotuning (cuda::set_gemm_autotune, ZT_GEMM_AUTOTUNE=1): on a problem's first call of
// at least kTuneMinFlops, the heuristic's top kTuneCandidates algorithms are each run
// kTuneReps times (after one warm-up) and timed with CUDA events; the fastest is cached.
// The heuristic's first choice is a model's guess and is not always the fastest kernel
// for the shape (the step's GEMMs are few shapes, each called every layer of every step,
// so a one-off tuning of ~1 ms per shape pays back within a step). Candidates run into
// D itself when beta = 0 (the real call overwrites it after), else into a zeroed scratch
// D (so the accumulation happens once); problems whose scratch would exceed
// kTuneScratchBytes keep the heuristic's choice. One host wait per tuned problem, on its
// first call only.
// Pointer alignments are passed as CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*: the default (256
// bytes) would let cuBLASLt pick kernels that need more alignment than a view into the
// middle of a buffer has.
#include "backend/cuda/matmul.h"

#include <cublasLt.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/convert.h"
#include "backend/cuda/stream.h"
#include "backend/cuda_api.h"
#include "core/env_vars.h"
#include "core/error.h"

namespace zt::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      break;
  }
  ZT_CHECK(false, "cuBLASLt matmul: unsupported dtype ", dtype_name(t));
  return CUDA_R_32F;
}

// Largest power of two (at most 256) dividing the address.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 1;
  while (al < 256 && a % (2 * al) == 0) al *= 2;
  return al;
}

struct DescHolder {
  cublasLtMatmulDesc_t d = nullptr;
  ~DescHolder() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct LayoutHolder {
  cublasLtMatrixLayout_t l = nullptr;
  ~LayoutHolder() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct PrefHolder {
  cublasLtMatmulPreference_t p = nullptr;
  ~PrefHolder() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

constexpr int kTuneCandidates = 8;
constexpr int kTuneReps = 3;
constexpr double kTuneMinFlops = 1e9;                    // smaller products keep the heuristic's choice
constexpr size_t kTuneScratchBytes = size_t{256} << 20;  // scratch D for beta != 0

std::atomic<int> g_autotune{-1};  // -1: not yet read from ZT_GEMM_AUTOTUNE

// The events and timing of one candidate: the mean milliseconds of kTuneReps runs, or a
// negative value when cuBLASLt refuses the algorithm for the problem.
template <class RunFn>
float time_candidate(const RunFn& run, cudaStream_t stream) {
  if (run() != CUBLAS_STATUS_SUCCESS) return -1.0f;  // warm-up, and the check that it runs
  Event start(/*timing=*/true), stop(/*timing=*/true);
  start.record(stream);
  for (int r = 0; r < kTuneReps; ++r)
    if (run() != CUBLAS_STATUS_SUCCESS) return -1.0f;
  stop.record(stream);
  stop.synchronize();
  return Event::elapsed_ms(start, stop) / static_cast<float>(kTuneReps);
}

std::mutex g_cache_mutex;
std::unordered_map<std::string, CachedAlgo>& algo_cache() {
  static auto* cache = new std::unordered_map<std::string, CachedAlgo>();  // never destroyed
  return *cache;
}

}  // namespace

void set_gemm_autotune(bool on) { g_autotune.store(on ? 1 : 0); }

bool gemm_autotune() {
  int v = g_autotune.load();
  if (v < 0) {
    v = env_equals(EnvVar::GemmAutotune, "1") ? 1 : 0;
    int expected = -1;
    g_autotune.compare_exchange_strong(expected, v);
    v = g_autotune.load();
  }
  return v == 1;
}

bool matmul_output_supported(DType ab, DType d) {
  switch (ab) {
    case DType::F32:
      return d == DType::F32;
    case DType::BF16:
      return d == DType::BF16 || d == DType::F32;
    case DType::F16:
      return d == DType::F16 || d == DType::F32;
    default:
      return false;
  }
}

DType act_weight_compute_dtype(DType act, DType weight) {
  if (act == weight) return act;
  if (act == DType::F32) return weight;
  return DType::F32;
}

DType act_act_compute_dtype(DType a, DType b) { return a == b ? a : DType::F32; }

const void* device_as_dtype(const void* src, DType from, DType to, size_t n, Buffer& holder, size_t min_align) {
  if (n == 0) return src;
  const bool aligned = reinterpret_cast<uintptr_t>(src) % min_align == 0;
  if (from == to && aligned) return src;
  const cudaStream_t stream = compute_stream();
  holder = Buffer(n * dtype_size(to), Device::cuda(context().device));
  void* dst = holder.data();
  if (from == to) {
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(to), cudaMemcpyDeviceToDevice, stream));
  } else if (from == DType::F32 && to == DType::BF16) {
    convert_f32_to_bf16(static_cast<const float*>(src), static_cast<bf16*>(dst), n, stream);
  } else if (from == DType::F32 && to == DType::F16) {
    convert_f32_to_f16(static_cast<const float*>(src), static_cast<f16*>(dst), n, stream);
  } else if (from == DType::BF16 && to == DType::F32) {
    convert_bf16_to_f32(static_cast<const bf16*>(src), static_cast<float*>(dst), n, stream);
  } else if (from == DType::F16 && to == DType::F32) {
    convert_f16_to_f32(static_cast<const f16*>(src), static_cast<float*>(dst), n, stream);
  } else {
    ZT_CHECK((from == DType::BF16 || from == DType::F16) && (to == DType::BF16 || to == DType::F16),
             "device_as_dtype: no conversion from ", dtype_name(from), " to ", dtype_name(to));
    // bf16 <-> f16 through f32: exact widening, one rounding.
    Buffer wide(n * sizeof(float), Device::cuda(context().device));
    if (from == DType::BF16)
      convert_bf16_to_f32(static_cast<const bf16*>(src), static_cast<float*>(wide.data()), n, stream);
    else
      convert_f16_to_f32(static_cast<const f16*>(src), static_cast<float*>(wide.data()), n, stream);
    if (to == DType::BF16)
      convert_f32_to_bf16(static_cast<const float*>(wide.data()), static_cast<bf16*>(dst), n, stream);
    else
      convert_f32_to_f16(static_cast<const float*>(wide.data()), static_cast<f16*>(dst), n, stream);
  }
  return dst;
}

void matmul(const MatrixRef& a, const MatrixRef& b, void* d, DType d_dtype, int64_t d_ld, float alpha, float beta,
            const void* bias) {
  ZT_CHECK(a.dtype == b.dtype, "matmul: A is ", dtype_name(a.dtype), " but B is ", dtype_name(b.dtype));
  ZT_CHECK(matmul_output_supported(a.dtype, d_dtype), "matmul: cuBLASLt cannot write ", dtype_name(d_dtype), " from ",
           dtype_name(a.dtype), " inputs");
  const int64_t M = a.op_rows(), K = a.op_cols(), N = b.op_cols();
  ZT_CHECK(b.op_rows() == K, "matmul: inner dimensions differ: op(A) is [", M, ", ", K, "], op(B) is [", b.op_rows(),
           ", ", N, "]");
  const int64_t ldd = d_ld ? d_ld : N;
  ZT_CHECK(a.stride() >= a.cols && b.stride() >= b.cols && ldd >= N, "matmul: a leading dimension is too small");
  ZT_CHECK(bias == nullptr || beta == 0.0f, "matmul: a bias needs beta = 0");
  if (M == 0 || N == 0) return;
  const cudaStream_t stream = compute_stream();
  const size_t esize = dtype_size(d_dtype);

  if (K == 0) {  // the product is empty: D = beta D (+ bias)
    ZT_CHECK(beta == 0.0f || beta == 1.0f, "matmul: K = 0 supports beta 0 or 1 only");
    if (bias != nullptr) {
      broadcast_rows(d, d_dtype, bias, M, N, ldd, stream);
    } else if (beta == 0.0f) {
      ZT_CUDA_CHECK(cudaMemset2DAsync(d, static_cast<size_t>(ldd) * esize, 0, static_cast<size_t>(N) * esize,
                                      static_cast<size_t>(M), stream));
    }
    return;
  }

  // cuBLASLt's (column-major) problem: D^T [N, M] = op(B)^T [N, K] op(A)^T [K, M].
  const cublasOperation_t op_a = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // its A: our B
  const cublasOperation_t op_b = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // its B: our A
  const cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  const uint32_t align_a = alignment_of(b.data), align_b = alignment_of(a.data), align_d = alignment_of(d);

  DescHolder desc;
  ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (bias) {
    // The bias has D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE left at its default).
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  LayoutHolder lay_a, lay_b, lay_d;
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lay_a.l, cuda_type(b.dtype), static_cast<uint64_t>(b.cols),
                                             static_cast<uint64_t>(b.rows), b.stride()));
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lay_b.l, cuda_type(a.dtype), static_cast<uint64_t>(a.cols),
                                             static_cast<uint64_t>(a.rows), a.stride()));
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lay_d.l, cuda_type(d_dtype), static_cast<uint64_t>(N),
                                             static_cast<uint64_t>(M), ldd));

  BlasLtHandle& lt = context().blaslt;
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const size_t scratch_bytes = static_cast<size_t>(ldd) * static_cast<size_t>(M) * esize;
  const bool tune = gemm_autotune() && flops >= kTuneMinFlops && (beta == 0.0f || scratch_bytes <= kTuneScratchBytes);
  const std::string key =
      str(static_cast<int>(a.dtype), ',', static_cast<int>(d_dtype), ',', a.trans, b.trans, ',', M, ',', N, ',', K, ',',
          a.stride(), ',', b.stride(), ',', ldd, ',', align_a, ',', align_b, ',', align_d, ',',
          bias ? static_cast<int>(alignment_of(bias)) : 0, ',', beta == 0.0f, tune);
  CachedAlgo algo;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) {
      algo = it->second;
      cached = true;
    }
  }
  if (!cached) {
    PrefHolder pref;
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t ws = lt.workspace_bytes();
    ZT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                         sizeof(align_a)));
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                         sizeof(align_b)));
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                         sizeof(align_d)));
    ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                         sizeof(align_d)));
    cublasLtMatmulHeuristicResult_t results[kTuneCandidates]{};
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt.get(), desc.d, lay_a.l, lay_b.l, lay_d.l, lay_d.l,
                                                             pref.p, tune ? kTuneCandidates : 1, results, &returned);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) ZT_CUBLAS_CHECK(st);
    algo.found = st == CUBLAS_STATUS_SUCCESS && returned > 0;
    if (algo.found) algo.algo = results[0].algo;
    if (algo.found && tune && returned > 1) {
      Buffer scratch;
      void* target = d;
      if (beta != 0.0f) {
        scratch = Buffer(scratch_bytes, Device::cuda(context().device));
        ZT_CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, scratch_bytes, stream));
        target = scratch.data();
      }
      float best = -1.0f;
      for (int i = 0; i < returned; ++i) {
        const cublasLtMatmulAlgo_t* candidate = &results[i].algo;
        const float ms = time_candidate(
            [&]() {
              return cublasLtMatmul(lt.get(), desc.d, &alpha, b.data, lay_a.l, a.data, lay_b.l, &beta, target, lay_d.l,
                                    target, lay_d.l, candidate, lt.workspace(), lt.workspace_bytes(), stream);
            },
            stream);
        if (ms >= 0.0f && (best < 0.0f || ms < best)) {
          best = ms;
          algo.algo = *candidate;
        }
      }
      ZT_CHECK(best >= 0.0f, "cuBLASLt refused every algorithm its heuristic proposed for D[", M, ", ", N,
               "] = op(A) op(B), K = ", K);
    }
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    algo_cache()[key] = algo;
  }
  if (!algo.found) {
    if (bias) {
      // No kernel with the bias epilogue for this problem: D = bias rows, then D += product.
      broadcast_rows(d, d_dtype, bias, M, N, ldd, stream);
      matmul(a, b, d, d_dtype, ldd, alpha, 1.0f, nullptr);
      return;
    }
    ZT_CHECK(false, "cuBLASLt has no algorithm for D[", M, ", ", N, "] ", dtype_name(d_dtype),
             " = op(A) op(B), K = ", K, ", inputs ", dtype_name(a.dtype), ", transposes ", a.trans, "/", b.trans,
             ", leading dimensions ", a.stride(), "/", b.stride(), "/", ldd, ", alignments ", align_b, "/", align_a,
             "/", align_d);
  }
  ZT_CUBLAS_CHECK(cublasLtMatmul(lt.get(), desc.d, &alpha, b.data, lay_a.l, a.data, lay_b.l, &beta, d, lay_d.l, d,
                                 lay_d.l, &algo.algo, lt.workspace(), lt.workspace_bytes(), stream));
}

void matmul_into(const MatrixRef& a, const MatrixRef& b, void* out, DType out_dtype, int64_t out_ld, bool accumulate,
                 const void* bias, DType bias_dtype) {
  ZT_CHECK(!(accumulate && bias), "matmul_into: a bias only for = outputs");
  const int64_t M = a.op_rows(), N = b.op_cols();
  if (M == 0 || N == 0) return;
  const Device dev = Device::cuda(context().device);
  if (matmul_output_supported(a.dtype, out_dtype)) {
    Buffer bias_holder;
    const void* b_out =
        bias ? device_as_dtype(bias, bias_dtype, out_dtype, static_cast<size_t>(N), bias_holder, 16) : nullptr;
    matmul(a, b, out, out_dtype, out_ld, 1.0f, accumulate ? 1.0f : 0.0f, b_out);
    return;
  }
  // cuBLASLt cannot write out's dtype from these inputs (f32 inputs, 16-bit out): f32 scratch.
  ZT_CHECK(out_ld == 0 || out_ld == N, "matmul_into: a strided ", dtype_name(out_dtype), " output needs ",
           dtype_name(a.dtype), " inputs of its own dtype");
  const size_t n = static_cast<size_t>(M * N);
  Buffer scratch(n * sizeof(float), dev);
  Buffer bias_holder;
  const void* b_f32 =
      bias ? device_as_dtype(bias, bias_dtype, DType::F32, static_cast<size_t>(N), bias_holder, 16) : nullptr;
  matmul(a, b, scratch.data(), DType::F32, N, 1.0f, 0.0f, b_f32);
  const float* s = static_cast<const float*>(scratch.data());
  const cudaStream_t stream = compute_stream();
  if (accumulate) {
    accumulate_f32_into(out, out_dtype, s, n, stream);
  } else if (out_dtype == DType::BF16) {
    convert_f32_to_bf16(s, static_cast<bf16*>(out), n, stream);
  } else {
    ZT_CHECK(out_dtype == DType::F16, "matmul_into: unsupported output dtype ", dtype_name(out_dtype));
    convert_f32_to_f16(s, static_cast<f16*>(out), n, stream);
  }
}

}  // namespace zt::cuda
