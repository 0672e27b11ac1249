// zerotrain bench <benchmark> [options]: built-in benchmarks. `comm`: the collectives over
// sizes in nccl-tests' format (bench_comm.h); every rank of a job runs the same command
// line (mpirun -np N zerotrain bench comm), rank 0 prints. `io`: a drive's O_DIRECT
// bandwidth for NVMe offload, swept over the aio settings, next to dd (bench_io.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/args.h"
#include "cli/bench_comm.h"
#include "cli/bench_io.h"
#include "cli/command.h"
#include "core/error.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: zerotrain bench comm [--device cpu|cuda] [--ops all_reduce,reduce_scatter,all_gather]
                            [--dtype f32|bf16] [--min-bytes 1K] [--max-bytes 64M] [--factor 2]
                            [--warmup 5] [--iters 20] [--check on|off] [--json FILE]
       zerotrain bench io --path DIR [--size 1G] [--block-sizes 256K,1M,4M] [--queue-depths 1,4,16,32]
                          [--threads 1,4] [--engine auto|io_uring|threads] [--no-dd] [--json FILE]

Benchmarks:
  comm    the communicator's collectives over buffer sizes, in nccl-tests' columns.
          Run it under the launcher for several ranks:
            mpirun -np 2 zerotrain bench comm                  (host buffers over MPI)
            mpirun -np 8 zerotrain bench comm --device cuda    (GPU buffers over NCCL)
          bench/comm_bench.sh runs it next to PyTorch's collectives (bench/torch_comm.py).

  --device cpu|cuda     host buffers through MPI (one process: no communication), or GPU
                        buffers through NCCL, one GPU per rank (default cpu)
  --ops LIST            comma-separated: all_reduce, reduce_scatter, all_gather (default all)
  --dtype f32|bf16      element type (default f32)
  --min-bytes SIZE      first size, e.g. 4096, 64K, 16M, 1G (default 1K)
  --max-bytes SIZE      last size, included (default 64M)
  --factor N            each size is the previous times N, N >= 2 (default 2)
  --warmup N            untimed collectives before each size (default 5)
  --iters N             timed collectives per size, N >= 1 (default 20)
  --check on|off        fill the inputs with a rank- and index-dependent pattern of small
                        integers (exact in f32 and bf16) and count the elements of the
                        result that differ from the exact one (default on; any wrong
                        element makes the exit code 1)
  --json FILE           also write the rows as JSON (rank 0, atomically)

Columns (as nccl-tests):
  size      bytes of the per-rank buffer: all_reduce the buffer, reduce_scatter the
            input, all_gather the output (sizes are rounded down to whole elements per rank)
  count     elements per rank: all_reduce the buffer, reduce_scatter each rank's output,
            all_gather each rank's input
  time      microseconds per collective: the slowest rank's mean over --iters, after a
            barrier (GPU: queued back to back, the clock stops when the GPU is done; host:
            each collective is waited for before the next)
  algbw     size / time, GB/s (10^9 bytes)
  busbw     algbw x 2(n-1)/n for all_reduce, x (n-1)/n for the others (n ranks; 0 at n = 1):
            comparable with the link bandwidth, whatever n is
  #wrong    elements that differ from the exact result, summed over the ranks (N/A with
            --check off)
Ends with the mean busbw of each collective over the sizes.

  io      the drive under DIR (nvme_path) for NVMe offload's swaps: one file of --size
          bytes written and read whole with O_DIRECT through the asynchronous engine
          (io_uring, or a thread pool without liburing) for every block size x queue
          depth x threads, each with GB/s (10^9 bytes/s) and its ratio to `dd bs=1M
          oflag=direct` (write) / `iflag=direct` (read) run first on the same file; then
          the best settings reading one file while writing another (as pipelined
          swapping does), next to two dd doing the same; ends with the best settings as
          a ds_config "aio" section. The files are removed after.
  --path DIR            the folder to test (required; needs twice --size free)
  --size SIZE           bytes per pass, e.g. 256M, 4G (default 1G; larger than the drive's
                        cache for honest figures)
  --block-sizes LIST    piece sizes, comma-separated (default 256K,1M,4M)
  --queue-depths LIST   pieces in flight per thread (default 1,4,16,32)
  --threads LIST        aio thread counts, intra_op_parallelism (default 1,4)
  --engine NAME         auto (io_uring when usable), io_uring or threads (default auto)
  --no-dd               skip the dd baseline
  --json FILE           also write the rows as JSON
)";

bool parse_on_off(const std::string& flag, const std::string& text) {
  if (text == "on") return true;
  if (text == "off") return false;
  ZT_THROW_INPUT(flag, " expects on or off, got '", text, "'");
}

int64_t parse_at_least(const std::string& flag, const std::string& text, int64_t minimum) {
  const int64_t value = parse_int(flag, text);
  if (value < minimum) ZT_THROW_INPUT(flag, " must be at least ", minimum, ", got ", value);
  return value;
}

Device parse_bench_device(const std::string& flag, const std::string& text) {
  if (text == "cpu") return Device::cpu();
  // The rank's GPU is chosen by its local rank (one GPU per rank), not by an index here.
  if (text == "cuda") return Device::cuda();
  ZT_THROW_INPUT(flag, " expects cpu or cuda, got '", text, "' (each rank uses the GPU of its local rank)");
}

DType parse_bench_dtype(const std::string& flag, const std::string& text) {
  if (text == "f32" || text == "float32" || text == "fp32") return DType::F32;
  if (text == "bf16" || text == "bfloat16") return DType::BF16;
  ZT_THROW_INPUT(flag, " expects f32 or bf16, got '", text, "'");
}

CommBenchOptions parse_comm_options(const Args& args) {
  CommBenchOptions o;
  ArgParser p("bench comm");
  p.value("--device", [&](const std::string& v) { o.device = parse_bench_device("--device", v); });
  p.value("--ops", [&](const std::string& v) { o.ops = parse_collectives("--ops", v); });
  p.value("--dtype", [&](const std::string& v) { o.dtype = parse_bench_dtype("--dtype", v); });
  p.value("--min-bytes", [&](const std::string& v) { o.min_bytes = parse_byte_size("--min-bytes", v); });
  p.value("--max-bytes", [&](const std::string& v) { o.max_bytes = parse_byte_size("--max-bytes", v); });
  p.value("--factor", [&](const std::string& v) { o.factor = parse_at_least("--factor", v, 2); });
  p.value("--warmup", [&](const std::string& v) { o.warmup = parse_at_least("--warmup", v, 0); });
  p.value("--iters", [&](const std::string& v) { o.iters = parse_at_least("--iters", v, 1); });
  p.value("--check", [&](const std::string& v) { o.check = parse_on_off("--check", v); });
  p.value("--json", [&](const std::string& v) { o.json_path = v; });
  p.parse(args);
  if (o.min_bytes > o.max_bytes) {
    ZT_THROW_INPUT("--min-bytes (", o.min_bytes, ") is larger than --max-bytes (", o.max_bytes,
                   "); give a range with min <= max");
  }
  if (!o.json_path.empty()) {
    // Found now rather than after the whole sweep.
    const auto dir = std::filesystem::absolute(o.json_path).parent_path();
    if (!std::filesystem::is_directory(dir)) {
      ZT_THROW_INPUT("--json ", o.json_path, ": the directory ", dir.string(), " does not exist; create it first");
    }
  }
  return o;
}

template <class T>
std::vector<T> parse_list(const std::string& flag, const std::string& text, T (*one)(const std::string&,
                                                                                      const std::string&)) {
  std::vector<T> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(one(flag, text.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

size_t parse_block(const std::string& flag, const std::string& text) {
  const size_t b = parse_byte_size(flag, text);
  if (b % 4096 != 0) ZT_THROW_INPUT(flag, ": ", text, " is not a multiple of 4K (O_DIRECT's alignment)");
  return b;
}

int parse_positive(const std::string& flag, const std::string& text) {
  return static_cast<int>(std::min<int64_t>(parse_at_least(flag, text, 1), 4096));
}

IoBenchOptions parse_io_options(const Args& args) {
  IoBenchOptions o;
  ArgParser p("bench io");
  p.value("--path", [&](const std::string& v) { o.path = v; });
  p.value("--size", [&](const std::string& v) { o.size = parse_byte_size("--size", v); });
  p.value("--block-sizes", [&](const std::string& v) { o.block_sizes = parse_list("--block-sizes", v, parse_block); });
  p.value("--queue-depths",
          [&](const std::string& v) { o.queue_depths = parse_list("--queue-depths", v, parse_positive); });
  p.value("--threads", [&](const std::string& v) { o.threads = parse_list("--threads", v, parse_positive); });
  p.value("--engine", [&](const std::string& v) {
    if (v == "auto") {
      o.engine = io::IoEngine::Auto;
    } else if (v == "io_uring" || v == "uring") {
      o.engine = io::IoEngine::Uring;
    } else if (v == "threads") {
      o.engine = io::IoEngine::Threads;
    } else {
      ZT_THROW_INPUT("--engine expects auto, io_uring or threads, got '", v, "'");
    }
  });
  p.flag("--no-dd", [&] { o.dd = false; });
  p.value("--json", [&](const std::string& v) { o.json_path = v; });
  p.parse(args);
  if (o.path.empty()) ZT_THROW_INPUT("bench io needs --path DIR: a folder on the drive to test (your nvme_path)");
  if (o.size < (1 << 20)) ZT_THROW_INPUT("--size must be at least 1M, got ", o.size, " bytes");
  return o;
}

int run_bench(const Args& args) {
  constexpr const char* kList =
      "benchmarks: comm (collectives over sizes, nccl-tests columns), io (a drive's O_DIRECT bandwidth for NVMe "
      "offload); see 'zerotrain bench --help'";
  if (args.empty()) {
    std::fprintf(stderr, "usage: zerotrain bench <benchmark> [options]\n%s\n", kList);
    return 2;
  }
  const std::string which = args[0];
  if (which == "comm") return run_comm_bench(parse_comm_options(Args(args.begin() + 1, args.end())));
  if (which == "io") return run_io_bench(parse_io_options(Args(args.begin() + 1, args.end())));
  const std::string best = closest(which, {"comm", "io"});
  ZT_THROW_INPUT("unknown benchmark '", which, "'", best.empty() ? std::string() : " (did you mean " + best + "?)",
                 "; ", kList);
}

const Registrar registrar{
    {"bench", "benchmarks: comm (collectives, nccl-tests style), io (a drive for NVMe offload)", run_bench, kHelp}};

}  // namespace
}  // namespace zt::cli
