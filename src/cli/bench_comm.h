// `zerotrain bench comm`: an nccl-tests-style sweep of the communicator's collectives
// (all_reduce, reduce_scatter, all_gather) over buffer sizes, on host buffers over MPI or on
// GPU buffers over NCCL. bench_cmd.cpp parses the flags; this is the measurement and report.
//
// Columns follow nccl-tests so that the numbers read the same:
//   size    bytes of the per-rank buffer: all_reduce the buffer, reduce_scatter the input,
//           all_gather the output (n ranks x the per-rank part);
//   count   elements per rank as nccl-tests prints them: all_reduce the buffer,
//           reduce_scatter each rank's output, all_gather each rank's input;
//   time    microseconds per collective, the slowest rank's mean over `iters`;
//   algbw   size / time;  busbw  algbw x 2(n-1)/n (all_reduce) or (n-1)/n (the others),
//           which is 0 at n = 1 as in nccl-tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace zt::cli {

enum class Collective { AllReduce, ReduceScatter, AllGather };
const char* collective_name(Collective op);
const std::vector<Collective>& all_collectives();
// Parses "all_reduce,reduce_scatter,all_gather" (any non-empty subset, in that spelling).
// Throws BadInput naming `flag` and the choices.
std::vector<Collective> parse_collectives(const std::string& flag, const std::string& list);

// Parses a byte count: 4096, 64K, 16M, 1G (powers of 1024; an optional trailing B, any
// case). Throws BadInput naming `flag`.
size_t parse_byte_size(const std::string& flag, const std::string& text);

// min, min*factor, min*factor^2, ... up to and including max.
std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, int64_t factor);

// The bus-bandwidth factor of nccl-tests for n ranks.
double busbw_factor(Collective op, int ranks);

struct CommBenchOptions {
  Device device = Device::cpu();
  std::vector<Collective> ops = all_collectives();
  DType dtype = DType::F32;
  size_t min_bytes = size_t{1} << 10;
  size_t max_bytes = size_t{64} << 20;
  int64_t factor = 2;
  int64_t warmup = 5;
  int64_t iters = 20;
  bool check = true;
  std::string json_path;  // empty: no JSON
};

struct CommBenchRow {
  Collective op = Collective::AllReduce;
  size_t bytes = 0;
  int64_t count = 0;
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  std::optional<int64_t> wrong;  // summed over ranks; empty with --check off
};

// Collective over every rank of the job: each runs the sweep, rank 0 prints the table (and
// writes the JSON). Returns the exit code: 0, or 1 when any element was wrong. Throws
// Unsupported for --device cuda without a GPU or NCCL.
int run_comm_bench(const CommBenchOptions& options);

}  // namespace zt::cli
