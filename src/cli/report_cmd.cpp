// zerotrain report [--json]: the build and the machine (ds_report / accelerate env).
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/report.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain report [--json]

Prints what this zerotrain is and what it runs on, for bug reports and for checking an
install (as DeepSpeed's ds_report and `accelerate env` do):

  zerotrain   version, git commit (as of the last CMake configure), build type,
              compiler, C++ standard, flags, build options
  cuda        whether the CUDA backend is compiled in; toolkit, runtime, driver,
              cuBLAS / cuBLASLt versions; every visible GPU (name, memory, sm, SMs)
  cpu         model, logical / usable CPUs, memory, vector features (avx2, fma, f16c,
              avx512f, avx512_bf16, amx_bf16) and those the build needs
  blas        OpenBLAS version, build config, kernel core, threading, threads
  openmp      OpenMP version, threads (ZT_NUM_THREADS / OMP_NUM_THREADS when set)
  features    optional parts compiled in: CUDA, SentencePiece, PCRE2, NCCL, MPI, ...
  system      kernel, libc
  environment every ZT_* environment variable zerotrain reads, with its value
              ("unset", or the value; test-only ones marked): docs/launching.md

  --json      one JSON object {"section": {"key": value}} instead of the table
)";

int run_report(const Args& args) {
  bool as_json = false;
  ArgParser p("report");
  p.flag("--json", [&] { as_json = true; });
  p.parse(args);
  const auto report = environment_report();
  const std::string text = as_json ? report_json(report).dump(2) + "\n" : report_table(report);
  std::fputs(text.c_str(), stdout);
  return 0;
}

const Registrar registrar{
    {"report", "print the build and the machine: version, compiler, CUDA, GPUs, BLAS, CPU", run_report, kHelp}};

}  // namespace
}  // namespace zt::cli
