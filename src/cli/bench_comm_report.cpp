#include "cli/bench_comm_report.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace zt::cli {
namespace {

// The mean busbw over a collective's rows, as nccl-tests' "Avg bus bandwidth".
double average_busbw(const std::vector<CommBenchRow>& rows, Collective op, int* sizes) {
  double sum = 0;
  *sizes = 0;
  for (const CommBenchRow& r : rows) {
    if (r.op != op) continue;
    sum += r.busbw_gbs;
    ++*sizes;
  }
  return *sizes ? sum / *sizes : 0.0;
}

}  // namespace

void print_comm_header(const CommBenchOptions& o, const CommBenchSetup& setup) {
  std::printf("# zerotrain bench comm (nccl-tests columns; zerotrain bench --help explains them)\n");
  std::printf("# world size %d, backend %s, device %s, dtype %s\n", setup.ranks, setup.backend.c_str(),
              setup.device.c_str(), dtype_name(o.dtype));
  std::printf("# sizes %zu..%zu B x%lld, warmup %lld, iters %lld, check %s\n#\n", o.min_bytes, o.max_bytes,
              static_cast<long long>(o.factor), static_cast<long long>(o.warmup), static_cast<long long>(o.iters),
              o.check ? "on" : "off");
  std::printf("# %12s  %12s  %5s  %14s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "op", "time", "algbw", "busbw",
              "#wrong");
  std::printf("# %12s  %12s  %5s  %14s  %10s  %8s  %8s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)");
  std::fflush(stdout);
}

void print_comm_row(const CommBenchRow& r, DType dtype) {
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  std::printf("  %12zu  %12lld  %5s  %14s  %10.2f  %8.2f  %8.2f  %6s\n", r.bytes, static_cast<long long>(r.count),
              dtype_name(dtype), collective_name(r.op), r.time_us, r.algbw_gbs, r.busbw_gbs, wrong.c_str());
  std::fflush(stdout);
}

void print_comm_summary(const std::vector<CommBenchRow>& rows, const CommBenchOptions& o) {
  for (const Collective op : o.ops) {
    int sizes = 0;
    const double avg = average_busbw(rows, op, &sizes);
    std::printf("# avg busbw %-14s : %.3f GB/s over %d sizes\n", collective_name(op), avg, sizes);
  }
  if (!o.check) {
    std::printf("# wrong elements : not checked (--check off)\n");
  } else {
    long long wrong = 0;
    for (const CommBenchRow& r : rows) wrong += r.wrong.value_or(0);
    std::printf("# wrong elements : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
  }
  std::fflush(stdout);
}

void write_comm_json(const std::string& path, const CommBenchOptions& o, const CommBenchSetup& setup,
                     const std::vector<CommBenchRow>& rows) {
  nlohmann::ordered_json doc;
  doc["tool"] = "zerotrain";
  doc["world_size"] = setup.ranks;
  doc["backend"] = setup.backend;
  doc["device"] = setup.device;
  doc["dtype"] = dtype_name(o.dtype);
  doc["warmup"] = o.warmup;
  doc["iters"] = o.iters;
  doc["check"] = o.check;
  auto& out = doc["rows"] = nlohmann::ordered_json::array();
  for (const CommBenchRow& r : rows) {
    nlohmann::ordered_json row;
    row["op"] = collective_name(r.op);
    row["bytes"] = r.bytes;
    row["count"] = r.count;
    row["dtype"] = dtype_name(o.dtype);
    row["time_us"] = r.time_us;
    row["algbw_gbs"] = r.algbw_gbs;
    row["busbw_gbs"] = r.busbw_gbs;
    row["wrong"] = r.wrong ? nlohmann::ordered_json(*r.wrong) : nlohmann::ordered_json(nullptr);
    out.push_back(std::move(row));
  }
  auto& avg = doc["avg_busbw_gbs"] = nlohmann::ordered_json::object();
  for (const Collective op : o.ops) {
    int sizes = 0;
    avg[collective_name(op)] = average_busbw(rows, op, &sizes);
  }
  const std::string text = doc.dump(2) + "\n";
  io::write_file_atomic(path, [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
}

}  // namespace zt::cli
