// How fast does a safetensors model load, against `cat file > /dev/null` on the same
// (page-cached) file in the same run?
//
//   safetensors_load_bench [--preset gpt2-xl] [--dir DIR] [--runs 3] [--threads N] [--keep]
//
// Writes the preset's weights in bf16 (gpt2-xl: 1.56 B parameters, 3.1 GB) into a temporary
// directory under DIR (default: the build directory), reads the file once to warm the page
// cache, then alternates (a) `cat file > /dev/null` (popen) and (b) load_hf_weights into a
// bf16 registry of the preset (mmap, header validation, every byte copied into the
// registry's own buffers, GPT-2's Conv1D weights transposed). Prints the best time of each,
// their throughputs and the ratio load/cat (target >= 0.8). The loaded parameters are
// checksummed against the written ones.
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/transformer.h"

namespace fs = std::filesystem;
using namespace zt;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A checksum of the file-visible parameter bytes (padding rows excluded), order-independent
// across threads.
uint64_t checksum(const model::ParameterRegistry& reg) {
  uint64_t total = 0;
  reg.for_each([&](const model::Unit&, const model::ParamEntry& e) {
    const Shape& hf = e.spec.hf_shape.empty() ? e.spec.shape : e.spec.hf_shape;
    const int64_t n = shape_numel(hf);
    const uint16_t* p = static_cast<const uint16_t*>(e.value.data());
    uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t i = 0; i < n; ++i) sum += static_cast<uint64_t>(p[i]) * static_cast<uint64_t>(i % 65521 + 1);
    total += sum;
  });
  return total;
}

int run(int argc, char** argv) {
  std::string preset = "gpt2-xl";
  std::string base = ZT_SOURCE_DIR "/build";
  int runs = 3;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) ZT_THROW_INPUT(a, " needs a value");
      return argv[++i];
    };
    if (a == "--preset")
      preset = value();
    else if (a == "--dir")
      base = value();
    else if (a == "--runs")
      runs = std::max(1, std::atoi(value().c_str()));
    else if (a == "--threads")
      set_num_threads(std::atoi(value().c_str()));
    else if (a == "--keep")
      keep = true;
    else
      ZT_THROW_INPUT("unknown flag ", a, " (flags: --preset NAME --dir DIR --runs N --threads N --keep)");
  }
  const model::ModelConfig config = model::preset_config(preset);
  model::ModelOptions options;
  options.param_dtype = DType::BF16;
  options.allocate_grads = false;
  model::Transformer model(config, options);
  model::ParameterRegistry& reg = model.registry();
  const uint64_t file_bytes = static_cast<uint64_t>(config.num_parameters()) * 2;

  fs::create_directories(base);
  struct statvfs vfs {};
  if (::statvfs(base.c_str(), &vfs) == 0) {
    const double free_gb = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize) / 1e9;
    if (free_gb < static_cast<double>(file_bytes) / 1e9 + 1.0)
      ZT_THROW_INPUT(base, ": ", free_gb, " GB free, the ", preset, " file needs ",
                     static_cast<double>(file_bytes) / 1e9, " GB; pass a smaller --preset (gpt2-large, gpt2) or --dir");
  }
  const fs::path dir = fs::path(base) / ("safetensors_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "model.safetensors").string();

  // Cheap distinct values (not init_weights: 1.5 B normal draws would dominate the run).
  reg.for_each([&](model::Unit&, model::ParamEntry& e) {
    uint16_t* p = static_cast<uint16_t*>(e.value.data());
    const int64_t n = e.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint16_t>(0x3c00 + (i * 2654435761u >> 20) % 1024);
  });
  const uint64_t want = checksum(reg);
  auto t0 = Clock::now();
  model::save_hf_weights(reg, config, file, DType::BF16);
  const double write_s = seconds_since(t0);
  const uint64_t size = fs::file_size(file);
  std::printf("preset %s: %.3f B parameters, file %.2f GB (bf16), written in %.2f s (%.2f GB/s, with fsync)\n",
              preset.c_str(), static_cast<double>(config.num_parameters()) / 1e9, static_cast<double>(size) / 1e9,
              write_s, static_cast<double>(size) / 1e9 / write_s);
  std::printf("threads: %d\n", num_threads());

  const std::string cat = "cat '" + file + "' > /dev/null";
  auto run_cat = [&] {
    const auto c0 = Clock::now();
    FILE* p = ::popen(cat.c_str(), "r");
    if (!p || ::pclose(p) != 0) ZT_THROW_IO("cat ", file, " failed");
    return seconds_since(c0);
  };
  run_cat();  // warm the page cache
  double best_cat = 1e30, best_load = 1e30, best_open = 1e30;
  for (int r = 0; r < runs; ++r) {
    best_cat = std::min(best_cat, run_cat());
    for (auto& u : reg.units()) u->flat_params().zero();  // a load must write every byte again
    const auto l0 = Clock::now();
    model::load_hf_weights(reg, config, file);
    best_load = std::min(best_load, seconds_since(l0));
    const auto o0 = Clock::now();
    { io::SafetensorsReader header_only(file); }
    best_open = std::min(best_open, seconds_since(o0));
  }
  const uint64_t got = checksum(reg);
  const double gb = static_cast<double>(size) / 1e9;
  std::printf("cat > /dev/null      %.3f s  %6.2f GB/s\n", best_cat, gb / best_cat);
  std::printf("load_hf_weights      %.3f s  %6.2f GB/s   (open + validate alone: %.4f s)\n", best_load, gb / best_load,
              best_open);
  std::printf("ratio load/cat throughput: %.2f (target >= 0.8)%s\n", best_cat / best_load,
              got == want ? "" : "   CHECKSUM MISMATCH");
  if (!keep)
    fs::remove_all(dir);
  else
    std::printf("kept %s\n", file.c_str());
  return got == want ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    init_threads_from_env();
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "safetensors_load_bench: %s\n", e.what());
    return e.exit_code();
  }
}
