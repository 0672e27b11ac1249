// The CPU optimizer step (backend/cpu/optimizer.cpp, ZeRO-Offload's host AdamW) against
// the host's memory bandwidth: one AdamW step over N elements with f32 master weights and
// moments (for a 16-bit parameter; an f32 parameter holds its weights itself) and the
// gradient in bf16/f16/f32, next to a STREAM-like triad (a[i] = b[i] + s*c[i], f32) over
// three arrays of about the optimizer's footprint, with the same threads, in the same run.
// Bytes counted are those read and written once per element, STREAM's way, for both:
// ratio = adam_GBps / triad_GBps. That hides the write-allocate reads (the line of a
// write-only array is read first) in a quarter of the triad's traffic (16 bytes move per
// 12 counted) but in only the 16-bit parameter's share of the step's (30 per 28), so a
// step running at the triad's bandwidth shows ratio ~1.24; ratio_traffic counts those
// reads on both sides, and is ~1 when the step is memory-bound.
//
// usage: cpu_optimizer_bench [--numel N=268435456] [--threads T=all] [--grad bf16|f16|f32]
//          [--param bf16|f16|f32] [--isa auto|avx2|avx512|both] [--iters K=10] [--segments S=1]
// Prints each step, then one `RESULT key=value ...` line per instruction set.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/optimizer_isa.h"
#include "backend/optimizer_kernels.h"
#include "core/allocator.h"
#include "core/dtype.h"
#include "core/tensor.h"

using namespace zt;

namespace {

struct Options {
  int64_t numel = int64_t{256} << 20;
  int threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS, else all cores)
  DType grad = DType::BF16;
  DType param = DType::BF16;
  std::string isa = "auto";
  int iters = 10;
  int64_t segments = 1;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return false;
    }
    const std::string v = argv[++i];
    try {
      if (a == "--numel") {
        o->numel = static_cast<int64_t>(std::stod(v));  // 2.68e8 works too
      } else if (a == "--threads") {
        o->threads = std::stoi(v);
      } else if (a == "--grad") {
        o->grad = parse_dtype(v);
      } else if (a == "--param") {
        o->param = parse_dtype(v);
      } else if (a == "--isa") {
        o->isa = v;
      } else if (a == "--iters") {
        o->iters = std::stoi(v);
      } else if (a == "--segments") {
        o->segments = std::stoll(v);
      } else {
        std::fprintf(stderr, "unknown option %s\n", a.c_str());
        return false;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bad value for %s: %s (%s)\n", a.c_str(), v.c_str(), e.what());
      return false;
    }
  }
  const bool isa_ok = o->isa == "auto" || o->isa == "avx2" || o->isa == "avx512" || o->isa == "both";
  if (o->numel < 1 || o->iters < 1 || o->segments < 1 || !isa_ok || !is_floating(o->grad) || !is_floating(o->param)) {
    std::fprintf(stderr, "need --numel, --iters, --segments >= 1, --isa auto|avx2|avx512|both, float dtypes\n");
    return false;
  }
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Fills t with `scale` * a hash of the index in [-1, 1) (or [0, 1) when non-negative), in
// parallel with the kernels' static split, so each thread's pages sit on its NUMA node.
void fill(const Tensor& t, float scale, bool non_negative) {
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* data = static_cast<T*>(t.data());
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      uint64_t h = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
      h ^= h >> 29;
      float u = static_cast<float>(h & 0xffffff) / 16777216.0f;
      if (!non_negative) u = 2.0f * u - 1.0f;
      data[i] = store_as<T>(scale * u);
    }
  });
}

struct Triad {
  int64_t n;
  // Not value-initialised: the first touch is the parallel fill below (NUMA placement).
  // From the host allocator's pages, as the optimizer's buffers (huge pages when large).
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> a, b, c;
  static float* make(int64_t count) {
    return static_cast<float*>(allocate_host_pages(static_cast<size_t>(count) * sizeof(float), 64));
  }
  explicit Triad(int64_t count) : n(count), a(make(n)), b(make(n)), c(make(n)) {
    float *pa = a.get(), *pb = b.get(), *pc = c.get();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = 0.0f, pb[i] = 1.0f, pc[i] = 2.0f;
  }
  // GB/s of one pass (12 bytes per element: b and c read, a written).
  double run() {
    float *pa = a.get(), *pb = b.get(), *pc = c.get();
    const float s = 0.5f;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    return 12.0 * static_cast<double>(n) / seconds_since(t0) / 1e9;
  }
};

// The optimizer's buffers: parameter, master (16-bit parameters only), gradient, m and v.
struct AdamBuffers {
  OwnedTensor param, master, grad, m, v;
  AdamBuffers(int64_t n, DType pdt, DType gdt)
      : param({n}, pdt), grad({n}, gdt), m({n}, DType::F32), v({n}, DType::F32) {
    if (pdt != DType::F32) master = OwnedTensor({n}, DType::F32);
    fill(param, 1.0f, false);
    if (pdt != DType::F32) fill(master, 1.0f, false);
    fill(grad, 1e-2f, false);
    fill(m, 1e-3f, false);
    fill(v, 1e-4f, true);
  }
  Tensor master_or_none() const { return master.view().data() ? master.view() : Tensor(); }
  // Bytes read and written per element: master (or f32 parameter) read and written, the
  // 16-bit parameter written, the gradient read, m and v read and written.
  double bytes_per_element() const {
    const double p = static_cast<double>(dtype_size(param->dtype())), g = dtype_size(grad->dtype());
    return master.view().data() ? 4 + 4 + p + g + 16 : p + p + g + 16;
  }
  // Plus the write-allocate read of the 16-bit parameter, which is written only.
  double traffic_per_element() const {
    return bytes_per_element() + (master.view().data() ? static_cast<double>(dtype_size(param->dtype())) : 0.0);
  }
  double footprint_bytes() const {
    const double n = static_cast<double>(param->numel());
    return n * (dtype_size(param->dtype()) + dtype_size(grad->dtype()) + 8 + (master.view().data() ? 4 : 0));
  }
};

// `segments` equal segments covering the range, alternating weight decay 0.01 and 0 (as
// weights and biases do), so the segmented path with several segments per thread is timed.
OptimizerSegments make_segments(int64_t n, int64_t count) {
  OptimizerSegments segs;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t begin = n * k / count, end = n * (k + 1) / count;
    segs.push_back({begin, end - begin, k % 2 == 0 ? 0.01f : 0.0f});
  }
  return segs;
}

struct Measured {
  double step_s, triad_gbps;
};

Measured measure(const Options& o, AdamBuffers& b, Triad& triad, const OptimizerSegments& segs) {
  AdamWHyper h;
  h.lr = 1e-4f;
  h.grad_scale = 0.5f;
  const double bytes = b.bytes_per_element() * static_cast<double>(o.numel);
  std::vector<double> steps, triads;
  triad.run();  // warm-up: page faults, thread start
  for (int i = 0; i < o.iters; ++i) triads.push_back(triad.run());
  for (int i = 0; i <= o.iters; ++i) {
    h.step = i + 1;
    const auto t0 = std::chrono::steady_clock::now();
    cpu::adamw_step_segments(b.param, b.master_or_none(), b.grad, b.m, b.v, h, segs);
    const double s = seconds_since(t0);
    if (i == 0) continue;  // warm-up
    steps.push_back(s);
    std::printf("  step %2d: %.4f s  %.3e elem/s  %6.1f GB/s\n", i, s, static_cast<double>(o.numel) / s,
                bytes / s / 1e9);
  }
  return {median(steps), median(triads)};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = omp_get_max_threads();

  std::vector<cpu::OptimizerIsa> isas;
  if (o.isa == "avx2" || o.isa == "both") isas.push_back(cpu::OptimizerIsa::Avx2);
  if (o.isa == "avx512" || o.isa == "both") {
    if (cpu::optimizer_isa_supported(cpu::OptimizerIsa::Avx512)) {
      isas.push_back(cpu::OptimizerIsa::Avx512);
    } else {
      std::printf("no AVX-512 on this CPU: measuring avx2 only\n");
      if (isas.empty()) isas.push_back(cpu::OptimizerIsa::Avx2);
    }
  }
  if (o.isa == "auto") isas.push_back(cpu::optimizer_isa());

  AdamBuffers b(o.numel, o.param, o.grad);
  // The triad's three f32 arrays hold about as many bytes as the optimizer's buffers.
  Triad triad(std::max<int64_t>(1, static_cast<int64_t>(b.footprint_bytes() / 12.0)));
  const OptimizerSegments segs = make_segments(o.numel, o.segments);
  std::printf(
      "%s, %d threads; AdamW over %lld elements: param %s%s, grad %s, f32 m and v; %.0f bytes/element, "
      "%.2f GB footprint\n",
      cpu_model().c_str(), threads, static_cast<long long>(o.numel), dtype_name(o.param),
      o.param == DType::F32 ? "" : " + f32 master", dtype_name(o.grad), b.bytes_per_element(),
      b.footprint_bytes() / 1e9);

  for (cpu::OptimizerIsa isa : isas) {
    cpu::set_optimizer_isa(isa);
    std::printf("%s:\n", cpu::cpu_optimizer_isa());
    const Measured r = measure(o, b, triad, segs);
    const double elems = static_cast<double>(o.numel) / r.step_s;
    const double gbps = b.bytes_per_element() * elems / 1e9;
    std::printf(
        "RESULT isa=%s numel=%lld threads=%d param=%s grad=%s segments=%lld bytes_per_elem=%.0f step_s=%.5f "
        "elems_per_s=%.4e adam_GBps=%.2f triad_GBps=%.2f ratio=%.3f "
        "ratio_traffic=%.3f\n",
        cpu::cpu_optimizer_isa(), static_cast<long long>(o.numel), threads, dtype_name(o.param), dtype_name(o.grad),
        static_cast<long long>(o.segments), b.bytes_per_element(), r.step_s, elems, gbps, r.triad_gbps,
        gbps / r.triad_gbps, gbps * b.traffic_per_element() / b.bytes_per_element() / (r.triad_gbps * 16.0 / 12.0));
  }
  return 0;
}
