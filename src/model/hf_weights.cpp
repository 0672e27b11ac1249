#include "model/hf_weights.h"
#include "core/strings.h"
#include "core/fs.h"

#include "model/lora.h"

#include <sys/stat.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_file.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "model/hf_names.h"
#include "ops/copy.h"
#include "ops/elementwise.h"

namespace zt::model {
namespace {

using io::SafetensorsReader;
using io::TensorInfo;
using io::TensorSource;
using io::write_safetensors;

Shape reversed(const Shape& s) { return Shape(s.rbegin(), s.rend()); }

// Our unpadded shape of a parameter. hf_shape normally is that; accept a spec that records
// the file's (transposed) shape there too.
Shape unpadded_shape(const ParamSpec& spec) {
  const Shape& hf = spec.hf_shape.empty() ? spec.shape : spec.hf_shape;
  if (hf_file_transposed(spec) && hf != spec.shape && hf == reversed(spec.shape)) return spec.shape;
  return hf;
}

// dst [C, R] = transpose(src [R, C]) for elements of `es` bytes, cache-blocked.
template <class T>
void transpose_typed(const T* src, T* dst, int64_t R, int64_t C) {
  constexpr int64_t kB = 32;
#pragma omp parallel for collapse(2) if (R * C > (1 << 16)) schedule(static)
  for (int64_t r0 = 0; r0 < R; r0 += kB)
    for (int64_t c0 = 0; c0 < C; c0 += kB)
      for (int64_t r = r0; r < std::min(R, r0 + kB); ++r)
        for (int64_t c = c0; c < std::min(C, c0 + kB); ++c) dst[c * R + r] = src[r * C + c];
}
void transpose_bytes(const void* src, void* dst, int64_t R, int64_t C, size_t es) {
  switch (es) {
    case 2:
      transpose_typed(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), R, C);
      return;
    case 4:
      transpose_typed(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), R, C);
      return;
    case 8:
      transpose_typed(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), R, C);
      return;
  }
  ZT_CHECK(false, "transpose of ", es, "-byte elements");
}

#if defined(__SSE2__)
// An 8x8 block of 16-bit elements: three rounds of interleaves (16-, 32-, 64-bit).
template <bool Stream>
inline void transpose8x8_u16(const uint16_t* s, int64_t ss, uint16_t* d, int64_t ds) {
  __m128i a[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ss));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
  }
  u[0] = _mm_unpacklo_epi32(t[0], t[2]);
  u[1] = _mm_unpackhi_epi32(t[0], t[2]);
  u[2] = _mm_unpacklo_epi32(t[1], t[3]);
  u[3] = _mm_unpackhi_epi32(t[1], t[3]);
  u[4] = _mm_unpacklo_epi32(t[4], t[6]);
  u[5] = _mm_unpackhi_epi32(t[4], t[6]);
  u[6] = _mm_unpacklo_epi32(t[5], t[7]);
  u[7] = _mm_unpackhi_epi32(t[5], t[7]);
  if (Stream) {
    for (int i = 0; i < 4; ++i) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + (2 * i) * ds), _mm_unpacklo_epi64(u[i], u[i + 4]));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + (2 * i + 1) * ds), _mm_unpackhi_epi64(u[i], u[i + 4]));
    }
  } else {
    for (int i = 0; i < 4; ++i) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * i) * ds), _mm_unpacklo_epi64(u[i], u[i + 4]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * i + 1) * ds), _mm_unpackhi_epi64(u[i], u[i + 4]));
    }
  }
}

// memcpy with non-temporal stores: a load writes gigabytes nobody reads soon, and
// streaming stores skip reading every destination line first (a third of the traffic).
void copy_streaming(void* dst, const void* src, size_t n) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(n, static_cast<size_t>((16 - reinterpret_cast<uintptr_t>(d) % 16) % 16));
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  const size_t blocks = n / 64;
  for (size_t b = 0; b < blocks; ++b, d += 64, s += 64) {
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), x0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), x1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), x2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), x3);
  }
  std::memcpy(d, s, n % 64);
  _mm_sfence();
}
#else
void copy_streaming(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
#endif

// Rows [r0, r1) of src [R, C] into dst [C, R] (dst[c][r] = src[r][c]), in square tiles
// small enough for L1, so both sides stream through whole cache lines. Called from inside
// a parallel region (no nested threading).
template <class T>
void transpose_rows_typed(const T* src, T* dst, int64_t R, int64_t C, int64_t r0, int64_t r1) {
  constexpr int64_t kB = 64;
  for (int64_t rb = r0; rb < r1; rb += kB) {
    const int64_t re = std::min(r1, rb + kB);
    for (int64_t cb = 0; cb < C; cb += kB) {
      const int64_t ce = std::min(C, cb + kB);
      if (re - rb == kB && ce - cb == kB) {
#if defined(__SSE2__)
        if constexpr (sizeof(T) == 2) {
          // Destination rows advance in whole 16-byte pieces (i inner), so streaming
          // stores fill complete lines; they need 16-byte aligned rows.
          const bool aligned = reinterpret_cast<uintptr_t>(dst + cb * R + rb) % 16 == 0 && (R * 2) % 16 == 0;
          for (int64_t j = 0; j < kB; j += 8)
            for (int64_t i = 0; i < kB; i += 8) {
              const T* sp = src + (rb + i) * C + cb + j;
              T* dp = dst + (cb + j) * R + rb + i;
              if (aligned)
                transpose8x8_u16<true>(sp, C, dp, R);
              else
                transpose8x8_u16<false>(sp, C, dp, R);
            }
          continue;
        }
#endif
        for (int64_t c = cb; c < cb + kB; ++c) {
          T* d = dst + c * R + rb;
          const T* s = src + rb * C + c;
          for (int64_t r = 0; r < kB; ++r) d[r] = s[r * C];
        }
      } else {
        for (int64_t c = cb; c < ce; ++c)
          for (int64_t r = rb; r < re; ++r) dst[c * R + r] = src[r * C + c];
      }
    }
  }
}
void transpose_rows(const void* src, void* dst, int64_t R, int64_t C, int64_t r0, int64_t r1, size_t es) {
  switch (es) {
    case 2:
      transpose_rows_typed(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), R, C, r0, r1);
#if defined(__SSE2__)
      _mm_sfence();  // order the streaming stores before the job counts as done
#endif
      return;
    case 4:
      return transpose_rows_typed(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), R, C, r0, r1);
    case 8:
      return transpose_rows_typed(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), R, C, r0, r1);
  }
  ZT_CHECK(false, "transpose of ", es, "-byte elements");
}

void check_host_contiguous(const Tensor& t, const char* what) {
  ZT_CHECK(t.device().is_cpu(), what, " '", t.name(), "' must be on the host");
  ZT_CHECK(t.is_contiguous(), what, " '", t.name(), "' must be contiguous");
}

bool is_skipped_buffer(const ModelConfig& config, const std::string& name) {
  for (const std::string& suffix : hf_name_table(config.family).skipped_suffixes)
    if (ends_with(name, suffix)) return true;
  return false;
}

// A tensor's name in old hub files (e.g. the original gpt2 files: no "transformer."), or
// empty when the family has no such prefix or the name lacks it.
std::string legacy_name(const ModelConfig& config, const std::string& name) {
  const std::string& prefix = hf_name_table(config.family).legacy_prefix;
  if (prefix.empty() || name.rfind(prefix, 0) != 0) return {};
  return name.substr(prefix.size());
}

std::string join_limited(const std::vector<std::string>& names, size_t limit) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += str(", ... (", names.size() - limit, " more)");
  return out;
}

}  // namespace

bool hf_file_transposed(const ParamSpec& spec) { return spec.shape.size() == 2 && spec.layout != spec.hf_layout; }

HfTensorLayout hf_layout(const ModelConfig&, const ParamSpec& spec) {
  HfTensorLayout l;
  l.name = spec.name;
  // The weights table gives the registry the file's layout (GPT-2's Conv1D stays [in, out]),
  // so only a spec that says otherwise needs a transpose.
  l.transposed = hf_file_transposed(spec);
  const Shape ours = unpadded_shape(spec);
  l.shape = l.transposed ? reversed(ours) : ours;
  return l;
}

void to_hf_layout(const ModelConfig& config, const ParamSpec& spec, const Tensor& src, const Tensor& dst) {
  if (!src.device().is_cpu()) {
    const HfTensorLayout l = hf_layout(config, spec);
    const Shape ours = unpadded_shape(spec);
    if (!l.transposed && src.dtype() == dst.dtype() && !ours.empty() && ours.size() == src.shape().size() &&
        ours == l.shape && src.is_contiguous() && src.narrow(0, 0, ours[0]).shape() == ours) {
      // The unpadded rows are a contiguous prefix: copied straight into the file's buffer.
      ops::copy(Tensor(dst.data(), ours, dst.dtype()), src.narrow(0, 0, ours[0]));
      return;
    }
    // Otherwise the GPU model's tensor comes to the host one at a time.
    OwnedTensor staged(src.shape(), src.dtype());
    ops::copy(staged, src);
    return to_hf_layout(config, spec, staged, dst);
  }
  check_host_contiguous(src, "source");
  check_host_contiguous(dst, "destination");
  const HfTensorLayout l = hf_layout(config, spec);
  const Shape ours = unpadded_shape(spec);
  ZT_CHECK(src.shape() == spec.shape, spec.name, ": source shape ", shape_str(src.shape()), " vs registry ",
           shape_str(spec.shape));
  ZT_CHECK(dst.shape() == l.shape, spec.name, ": destination shape ", shape_str(dst.shape()), " vs file ",
           shape_str(l.shape));
  ZT_CHECK(ours.size() == spec.shape.size() && shape_numel(ours) <= shape_numel(spec.shape), spec.name, ": hf_shape ",
           shape_str(ours), " does not fit in ", shape_str(spec.shape));
  const size_t n = static_cast<size_t>(shape_numel(ours));
  if (!l.transposed) {
    // The unpadded tensor is the leading rows: a contiguous prefix.
    convert(src.data(), src.dtype(), dst.data(), dst.dtype(), n);
    return;
  }
  ZT_CHECK(ours.size() == 2 && ours == spec.shape, spec.name, ": Conv1D weight must be 2-D and unpadded");
  Buffer tmp(n * dtype_size(dst.dtype()));
  convert(src.data(), src.dtype(), tmp.data(), dst.dtype(), n);
  transpose_bytes(tmp.data(), dst.data(), ours[0], ours[1], dtype_size(dst.dtype()));
}

void from_hf_layout(const ModelConfig& config, const ParamSpec& spec, const Tensor& src, const Tensor& dst) {
  ZT_CHECK(src.device().is_cpu() && dst.device().is_cpu(), spec.name, ": from_hf_layout is host-only");
  check_host_contiguous(dst, "destination");
  const HfTensorLayout l = hf_layout(config, spec);
  const Shape ours = unpadded_shape(spec);
  ZT_CHECK(src.shape() == l.shape, spec.name, ": file shape ", shape_str(src.shape()), " vs ", shape_str(l.shape));
  ZT_CHECK(dst.shape() == spec.shape, spec.name, ": registry shape ", shape_str(dst.shape()), " vs ",
           shape_str(spec.shape));
  const size_t n = static_cast<size_t>(shape_numel(ours));
  const size_t src_es = dtype_size(src.dtype());
  const size_t dst_es = dtype_size(dst.dtype());
  // Mapped data may be unaligned for its dtype: stage it through aligned memory then.
  Buffer aligned;
  const void* sp = src.data();
  if (n && reinterpret_cast<uintptr_t>(sp) % src_es != 0) {
    aligned = Buffer(n * src_es);
    std::memcpy(aligned.data(), sp, n * src_es);
    sp = aligned.data();
  }
  char* dp = static_cast<char*>(dst.data());
  if (!l.transposed) {
    convert(sp, src.dtype(), dp, dst.dtype(), n);
  } else {
    ZT_CHECK(ours.size() == 2 && ours == spec.shape, spec.name, ": Conv1D weight must be 2-D and unpadded");
    Buffer tmp(n * dst_es);
    convert(sp, src.dtype(), tmp.data(), dst.dtype(), n);
    transpose_bytes(tmp.data(), dp, l.shape[0], l.shape[1], dst_es);
  }
  const size_t total = static_cast<size_t>(shape_numel(spec.shape));
  if (total > n) std::memset(dp + n * dst_es, 0, (total - n) * dst_es);  // vocab padding rows
}

std::vector<std::string> hf_weight_files(const std::string& path) {
  if (is_file(path)) return {path};
  if (!is_dir(path)) {
    struct stat st {};
    ZT_THROW_INPUT(path,
                   ::stat(path.c_str(), &st) == 0 ? ": not a regular file or a directory (a device, FIFO or socket)"
                                                  : ": no such file or directory",
                   " (expected a .safetensors file or a model directory)");
  }
  const std::string single = path + "/model.safetensors";
  if (is_file(single)) return {single};
  const std::string index = path + "/model.safetensors.index.json";
  if (!is_file(index)) {
    if (is_file(path + "/pytorch_model.bin") || is_file(path + "/pytorch_model.bin.index.json"))
      ZT_THROW_INPUT(path,
                     ": holds only pytorch_model.bin (pickle), which zerotrain does not read; convert it "
                     "to safetensors (e.g. model.save_pretrained(dir, safe_serialization=True))");
    ZT_THROW_INPUT(path, ": neither model.safetensors nor model.safetensors.index.json is present");
  }
  const std::string text = io::read_bounded_file(index, "safetensors index");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ZT_THROW_INPUT(index, ": not valid JSON (", e.what(), ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    ZT_THROW_INPUT(index, ": 'weight_map' (an object of tensor name -> shard file) is missing");
  std::set<std::string> shards;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      ZT_THROW_INPUT(index, ": weight_map entry for '", it.key(), "' must be a file name string");
    const std::string f = it.value().get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      ZT_THROW_INPUT(index, ": weight_map entry for '", it.key(), "' names '", f,
                     "'; shard files must be plain file names in the same directory");
    shards.insert(f);
  }
  if (shards.empty()) ZT_THROW_INPUT(index, ": weight_map is empty");
  std::vector<std::string> files;
  for (const auto& s : shards) {
    const std::string f = path + "/" + s;
    if (!is_file(f)) ZT_THROW_INPUT(index, ": shard file '", s, "' is missing from ", path);
    files.push_back(f);
  }
  return files;
}

namespace {

// registry name -> (reader, file tensor name)
using FoundTensors = std::map<std::string, std::pair<const SafetensorsReader*, std::string>>;

// Every file tensor matched to its registry name (old hub files' names without the
// family's prefix too); the others reported as skipped (buffers, a tied head) or unused.
FoundTensors match_file_tensors(model::ParameterRegistry& registry, const ModelConfig& config, const std::string& path,
                                const std::vector<std::unique_ptr<SafetensorsReader>>& readers, HfLoadReport& report) {
  FoundTensors found;
  for (const auto& r : readers) {
    for (const std::string& fname : r->names()) {
      std::string name = fname;
      const std::string& prefix = hf_name_table(config.family).legacy_prefix;
      if (!registry.find(name) && !prefix.empty() && registry.find(prefix + fname))
        name = prefix + fname;  // old hub files (the original gpt2's)
      if (registry.find(name)) {
        auto [it, inserted] = found.emplace(name, std::make_pair(r.get(), fname));
        if (!inserted)
          ZT_THROW_INPUT(path, ": tensor '", name, "' appears twice (as '", it->second.second, "' in ",
                         it->second.first->path(), " and as '", fname, "' in ", r->path(), ")");
      } else if (is_skipped_buffer(config, fname) || (fname == "lm_head.weight" && config.tie_word_embeddings)) {
        report.skipped.push_back(fname);
      } else {
        report.unused.push_back(fname);
      }
    }
  }
  return found;
}

// One piece of the copy from the files into the registry.
struct LoadJob {
  const ParamSpec* spec;
  Tensor src, dst;
  enum class Kind { Copy, Zero, Transpose, Convert } kind;
  int64_t begin, end;  // Copy, Zero: bytes; Transpose: source rows; Convert: unused (whole tensor)
  size_t tensor;       // index into the sources, for the error
};

// The jobs of one registry entry (validated against its file tensor first).
void plan_load_jobs(const ModelConfig& config, model::ParamEntry& e, const SafetensorsReader& reader,
                    const std::string& fname, size_t tensor, std::vector<LoadJob>& jobs) {
  const TensorInfo& info = reader.info(fname);
  const HfTensorLayout l = hf_layout(config, e.spec);
  if (info.shape != l.shape)
    ZT_THROW_INPUT(
        reader.path(), ": tensor '", fname, "' has shape ", shape_str(info.shape), ", expected ", shape_str(l.shape),
        e.spec.hf_layout == WeightLayout::InOut ? " (GPT-2 Conv1D layout [in, out])" : "", " for this config");
  if (info.supported && !is_floating(info.dtype))
    ZT_THROW_INPUT(reader.path(), ": tensor '", fname, "' has dtype ", info.dtype_name,
                   "; a floating dtype (F32, BF16, F16) is needed");
  const Tensor src = reader.tensor(fname);  // throws Unsupported for F64, I8, ...
  check_host_contiguous(e.value, "destination");
  const size_t es = dtype_size(src.dtype());
  const bool aligned = reinterpret_cast<uintptr_t>(src.data()) % es == 0;
  constexpr int64_t kChunk = 4 << 20;  // bytes per job
  if (src.dtype() == e.value.dtype() && aligned && !l.transposed) {
    const int64_t bytes = static_cast<int64_t>(src.nbytes());
    for (int64_t b = 0; b < bytes; b += kChunk)
      jobs.push_back({&e.spec, src, e.value, LoadJob::Kind::Copy, b, std::min(bytes, b + kChunk), tensor});
    const int64_t total = static_cast<int64_t>(e.value.nbytes());
    if (total > bytes)
      jobs.push_back({&e.spec, src, e.value, LoadJob::Kind::Zero, bytes, total, tensor});  // vocab padding
  } else if (src.dtype() == e.value.dtype() && aligned && l.shape.size() == 2 && e.spec.shape == reversed(l.shape)) {
    const int64_t R = l.shape[0], C = l.shape[1];
    const int64_t rows = std::max<int64_t>(64, kChunk / std::max<int64_t>(1, C * static_cast<int64_t>(es)) / 64 * 64);
    for (int64_t r = 0; r < R; r += rows)
      jobs.push_back({&e.spec, src, e.value, LoadJob::Kind::Transpose, r, std::min(R, r + rows), tensor});
  } else {
    jobs.push_back({&e.spec, src, e.value, LoadJob::Kind::Convert, 0, 0, tensor});
  }
}

// One job; whether what it copied is finite.
bool run_load_job(const ModelConfig& config, const LoadJob& job) {
  const size_t es = dtype_size(job.src.dtype());
  switch (job.kind) {
    case LoadJob::Kind::Copy: {
      const char* from = static_cast<const char*>(job.src.data()) + job.begin;
      const bool finite = ops::all_finite(
          Tensor(const_cast<char*>(from), {(job.end - job.begin) / static_cast<int64_t>(es)}, job.src.dtype()));
      copy_streaming(static_cast<char*>(job.dst.data()) + job.begin, from, static_cast<size_t>(job.end - job.begin));
      return finite;
    }
    case LoadJob::Kind::Zero:
      std::memset(static_cast<char*>(job.dst.data()) + job.begin, 0, static_cast<size_t>(job.end - job.begin));
      return true;
    case LoadJob::Kind::Transpose: {
      const int64_t R = job.src.shape()[0], C = job.src.shape()[1];
      const char* rows = static_cast<const char*>(job.src.data()) + job.begin * C * static_cast<int64_t>(es);
      const bool finite =
          ops::all_finite(Tensor(const_cast<char*>(rows), {(job.end - job.begin) * C}, job.src.dtype()));
      transpose_rows(job.src.data(), job.dst.data(), R, C, job.begin, job.end, es);
      return finite;
    }
    case LoadJob::Kind::Convert:
      from_hf_layout(config, *job.spec, job.src, job.dst);
      return ops::all_finite(job.dst);
  }
  return true;
}

// The jobs as parallel pieces of a few MB each, straight from the mapping into the registry
// (no staging buffer when the dtypes agree), so a load runs at memory bandwidth like `cat`.
// NaN/Inf weights would train on as NaN: each job checks what it copies, while the bytes
// are in cache (the source of a copy or transpose; the result of a conversion, which also
// catches values beyond a narrower dtype's range).
void run_load_jobs(const ModelConfig& config, const std::vector<LoadJob>& jobs,
                   const std::vector<std::pair<const SafetensorsReader*, std::string>>& sources) {
  std::exception_ptr error;
  const int64_t njobs = static_cast<int64_t>(jobs.size());
  std::vector<char> non_finite(jobs.size(), 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t j = 0; j < njobs; ++j) {
    try {
      non_finite[static_cast<size_t>(j)] = !run_load_job(config, jobs[static_cast<size_t>(j)]);
    } catch (...) {
#pragma omp critical(zt_hf_load_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!non_finite[j]) continue;
    const auto& [reader, fname] = sources[jobs[j].tensor];
    ZT_THROW_INPUT(reader->path(), ": tensor '", fname, "' holds non-finite values (NaN or Inf)",
                   jobs[j].kind == LoadJob::Kind::Convert
                       ? str(", or values beyond ", dtype_name(jobs[j].dst.dtype()), "'s range")
                       : std::string(),
                   ": the weights are broken (saved by a run that diverged, or damaged in a download or copy); "
                   "use another copy of the model");
  }
}

}  // namespace

HfLoadReport load_hf_weights(model::ParameterRegistry& registry, const ModelConfig& config, const std::string& path,
                             const model::Unit* only) {
  HfLoadReport report;
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  // Every byte will be read: map the pages up front (one unit: only its pages are touched).
  for (const auto& f : hf_weight_files(path))
    readers.push_back(std::make_unique<SafetensorsReader>(f, only ? io::Prefault::No : io::Prefault::Yes));
  // LoRA adapter units are no tensors of the base's files (train/lora_setup.h fills them).
  const auto selected = [only](const model::Unit& u) { return (!only || &u == only) && !model::is_lora_unit(u); };
  FoundTensors found = match_file_tensors(registry, config, path, readers, report);

  // A tensor that starts as another (an untied head as a tied base's embedding: its
  // spec's source_name) reads that one when the files lack its own.
  registry.for_each([&](model::Unit& unit, model::ParamEntry& e) {
    if (!selected(unit) || found.count(e.name()) || e.spec.source_name.empty()) return;
    const auto source = found.find(e.spec.source_name);
    if (source != found.end()) found.emplace(e.name(), source->second);
  });
  std::vector<std::string> missing;
  registry.for_each([&](model::Unit& unit, model::ParamEntry& e) {
    if (selected(unit) && !found.count(e.name())) missing.push_back(e.name());
  });
  if (!missing.empty())
    ZT_THROW_INPUT(path, ": ", missing.size(), " tensor", missing.size() == 1 ? " is" : "s are",
                   " missing from the weights: ", join_limited(missing, 20));
  if (!report.unused.empty() && (!only || only == registry.units().front().get()))
    ZT_WARN(path, ": ignoring ", report.unused.size(),
            " tensor(s) the model does not use: ", join_limited(report.unused, 10));

  // Validate everything first (nothing is written into the registry for a bad file), then
  // copy: the copy is the whole cost of a load.
  std::vector<LoadJob> jobs;
  // Each loaded tensor's file and name: a NaN/Inf weight is an error naming them.
  std::vector<std::pair<const SafetensorsReader*, std::string>> sources;
  registry.for_each([&](model::Unit& unit, model::ParamEntry& e) {
    if (!selected(unit)) return;
    if (!unit.has_params())
      ZT_THROW_INPUT(path, ": cannot load '", e.name(), "': the model's parameters are not allocated");
    if (!e.value.device().is_cpu())
      ZT_THROW_UNSUPPORTED(path, ": load_hf_weights fills host parameters only ('", e.name(), "' is on ",
                           e.value.device().name(), ")");
    const auto& [reader, fname] = found.at(e.name());
    plan_load_jobs(config, e, *reader, fname, sources.size(), jobs);
    sources.emplace_back(reader, fname);
    ++report.loaded;
  });
  run_load_jobs(config, jobs, sources);
  return report;
}

void save_hf_weights(const model::ParameterRegistry& registry, const ModelConfig& config, const std::string& path,
                     DType dtype) {
  if (!is_floating(dtype))
    ZT_THROW_INPUT(path, ": weights must be saved in f32, bf16 or f16 (got ", dtype_name(dtype), ")");
  const std::string file = is_dir(path) ? path + "/model.safetensors" : path;
  std::vector<TensorSource> sources;
  registry.for_each([&](const model::Unit& unit, const model::ParamEntry& e) {
    ZT_CHECK(unit.has_params(), "save_hf_weights: parameters of unit ", unit.name(), " are not allocated");
    const HfTensorLayout l = hf_layout(config, e.spec);
    const ParamSpec* spec = &e.spec;
    const Tensor value = e.value;
    const Shape shape = l.shape;
    sources.push_back({l.name, dtype, l.shape, [&config, spec, value, shape, dtype](void* dst) {
                         to_hf_layout(config, *spec, value, Tensor(dst, shape, dtype));
                       }});
  });
  write_safetensors(file, sources, {{"format", "pt"}});
}

}  // namespace zt::model

namespace zt::model {

void load_hf_unit_slice(const ModelConfig& config, const std::string& path, const Unit& unit, int64_t begin,
                        const Tensor& out) {
  ZT_CHECK(out.dim() == 1 && out.is_contiguous() && out.device().is_cpu(),
           "load_hf_unit_slice: out must be a host "
           "1-D tensor");
  out.zero();  // alignment gaps and vocab padding rows
  const int64_t end = begin + out.numel();
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  for (const auto& f : hf_weight_files(path)) readers.push_back(std::make_unique<SafetensorsReader>(f));
  for (const ParamEntry& p : unit.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
    if (hi <= lo) continue;
    const HfTensorLayout l = hf_layout(config, p.spec);
    // The tensor under its HF name (or its old hub name, e.g. without "transformer.").
    const SafetensorsReader* reader = nullptr;
    std::string fname;
    const std::string legacy = legacy_name(config, l.name);
    for (const auto& r : readers) {
      for (const std::string& candidate : {l.name, legacy.empty() ? l.name : legacy})
        if (r->contains(candidate)) {
          reader = r.get();
          fname = candidate;
          break;
        }
      if (reader) break;
    }
    if (!reader) ZT_THROW_INPUT(path, ": tensor '", l.name, "' is missing from the weights");
    const TensorInfo& info = reader->info(fname);
    if (info.shape != l.shape)
      ZT_THROW_INPUT(reader->path(), ": tensor '", fname, "' has shape ", shape_str(info.shape), ", expected ",
                     shape_str(l.shape), " for this config");
    if (info.supported && !is_floating(info.dtype))
      ZT_THROW_INPUT(reader->path(), ": tensor '", fname, "' has dtype ", info.dtype_name,
                     "; a floating dtype (F32, BF16, F16) is needed");
    const Tensor src = reader->tensor(fname);
    const Tensor dst = out.narrow(0, lo - begin, hi - lo);
    const int64_t first = lo - p.offset;  // element of the parameter (row-major, our layout)
    const bool aligned = reinterpret_cast<uintptr_t>(src.data()) % dtype_size(src.dtype()) == 0;
    if (!l.transposed && aligned) {
      // Our layout is the file's, with padding rows after the file's rows: element i of
      // the parameter is element i of the file tensor while i < its size, else zero.
      const int64_t file_n = src.numel();
      const int64_t n = std::max<int64_t>(0, std::min(hi - p.offset, file_n) - first);
      if (n > 0) ops::copy(dst.narrow(0, 0, n), src.reshape({file_n}).narrow(0, first, n));
    } else {
      // Transposed or unaligned in the file: convert the whole parameter, keep the range.
      OwnedTensor full(p.spec.shape, out.dtype());
      from_hf_layout(config, p.spec, src, full);
      ops::copy(dst, full->reshape({p.numel()}).narrow(0, first, hi - lo));
    }
    // As load_hf_weights: NaN/Inf weights (or values past the slice's dtype) are refused.
    if (!ops::all_finite(dst))
      ZT_THROW_INPUT(reader->path(), ": tensor '", fname, "' holds non-finite values (NaN or Inf), or values beyond ",
                     dtype_name(out.dtype()),
                     "'s range: the weights are broken (saved by a run that diverged, "
                     "or damaged in a download or copy); use another copy of the model");
  }
}

}  // namespace zt::model
