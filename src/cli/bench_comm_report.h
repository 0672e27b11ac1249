// What `zerotrain bench comm` prints on rank 0 (nccl-tests' columns, bench_comm.h) and the
// JSON it writes for scripts (bench/comm_bench.sh puts it next to bench/torch_comm.py's).
#pragma once
#include <string>
#include <vector>

#include "cli/bench_comm.h"

namespace zt::cli {

// What the run measured on, for the header and the JSON.
struct CommBenchSetup {
  int ranks = 1;
  std::string backend;  // "mpi", "single", "nccl"
  std::string device;   // "cpu", "cuda:0 NVIDIA H200"
};

void print_comm_header(const CommBenchOptions& options, const CommBenchSetup& setup);
void print_comm_row(const CommBenchRow& row, DType dtype);
// One "avg busbw" line per collective and the total of wrong elements.
void print_comm_summary(const std::vector<CommBenchRow>& rows, const CommBenchOptions& options);
// {"tool", "world_size", "backend", "device", "dtype", "warmup", "iters", "check",
//  "rows": [{"op", "bytes", "count", "dtype", "time_us", "algbw_gbs", "busbw_gbs", "wrong"}],
//  "avg_busbw_gbs": {op: value}}, written atomically (temp file + rename). "wrong" is null
// with --check off.
void write_comm_json(const std::string& path, const CommBenchOptions& options, const CommBenchSetup& setup,
                     const std::vector<CommBenchRow>& rows);

}  // namespace zt::cli
