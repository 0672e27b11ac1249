// `zerotrain bench comm` from the shell: one process prints every op and size with no wrong
// element; two ranks under mpirun report world size 2, nccl-tests' busbw factors and a JSON
// whose rows agree with the sweep and with each other; a wrong element fails the run; bad
// flags exit 2 naming the flag; --device cuda without a GPU exits 2 saying so (with a GPU it
// runs on NCCL). Multi-rank tests skip without mpirun.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda_api.h"
#include "common/shell.h"
#include "common/temp_dir.h"

namespace {

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

using zt::testing::have_mpirun;
using zt::testing::sh;

// Small and quick: 1K..64K.
const std::string kQuick = " bench comm --max-bytes 64K --iters 3 --warmup 1";

std::string zerotrain() { return zt::testing::zerotrain_binary(); }

std::string mpirun(int np) {
  return zt::testing::kMpirunEnv + "ZT_COLLECTIVE_TIMEOUT_S=30 OMP_NUM_THREADS=1 mpirun -np " + std::to_string(np) +
         " " + zerotrain();
}

// One table row: size count type op time algbw busbw #wrong.
struct Row {
  long long bytes = 0, count = 0;
  std::string type, op;
  double time_us = 0, algbw = 0, busbw = 0;
  std::string wrong;
};

std::vector<Row> table_rows(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  ", 0) != 0) continue;  // headers start with '#'
    std::istringstream fields(line);
    Row r;
    if (fields >> r.bytes >> r.count >> r.type >> r.op >> r.time_us >> r.algbw >> r.busbw >> r.wrong) rows.push_back(r);
  }
  return rows;
}

// Expected sizes: 1K..64K by 2, the three ops in order.
void expect_quick_sweep(const std::vector<Row>& rows, int ranks, const std::string& out) {
  const std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather"};
  ASSERT_EQ(rows.size(), 3u * 7u) << out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    EXPECT_EQ(r.op, ops[i / 7]) << out;
    EXPECT_EQ(r.bytes, 1024LL << (i % 7)) << out;
    EXPECT_EQ(r.type, "f32");
    EXPECT_EQ(r.count, r.op == "all_reduce" ? r.bytes / 4 : r.bytes / 4 / ranks) << r.op << " " << r.bytes;
    EXPECT_EQ(r.wrong, "0") << r.op << " " << r.bytes << "\n" << out;
    EXPECT_GE(r.time_us, 0.0);
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(BenchComm, OneProcessPrintsEveryOpAndSizeWithNoWrongElement) {
  const auto r = sh(zerotrain() + kQuick);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "# world size 1, backend single, device cpu, dtype f32");
  const auto rows = table_rows(r.out);
  expect_quick_sweep(rows, 1, r.out);
  // nccl-tests' factors are 0 at one rank.
  for (const Row& row : rows) EXPECT_EQ(row.busbw, 0.0) << row.op;
  EXPECT_HAS(r.out, "# avg busbw all_reduce");
  EXPECT_HAS(r.out, "# avg busbw all_gather");
  EXPECT_HAS(r.out, "# wrong elements : 0 OK");
}

TEST(BenchComm, TwoRanksReportBusBandwidthAndAJsonThatMatchesTheSweep) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  zt::testing::TempDir dir(zt::testing::build_temp_path("bench_comm_"));
  const std::string json = dir.file("comm.json");
  const auto r = sh(mpirun(2) + kQuick + " --json " + json);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_HAS(r.out, "# world size 2, backend mpi, device cpu, dtype f32");
  const auto rows = table_rows(r.out);
  expect_quick_sweep(rows, 2, r.out);

  const nlohmann::json doc = read_json(json);
  EXPECT_EQ(doc.at("world_size"), 2);
  EXPECT_EQ(doc.at("backend"), "mpi");
  ASSERT_EQ(doc.at("rows").size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& j = doc["rows"][i];
    for (const char* key : {"op", "bytes", "count", "dtype", "time_us", "algbw_gbs", "busbw_gbs", "wrong"})
      ASSERT_TRUE(j.contains(key)) << key << " in " << j.dump();
    EXPECT_EQ(j["op"], rows[i].op);
    EXPECT_EQ(j["bytes"], rows[i].bytes);
    EXPECT_EQ(j["count"], rows[i].count);
    EXPECT_EQ(j["dtype"], "f32");
    EXPECT_EQ(j["wrong"], 0);
    const double time_us = j["time_us"], algbw = j["algbw_gbs"], busbw = j["busbw_gbs"];
    ASSERT_GT(time_us, 0.0) << j.dump();
    EXPECT_NEAR(algbw, static_cast<double>(j["bytes"]) / (time_us * 1e3), 1e-9 * algbw) << j.dump();
    // 2(n-1)/n = 1 for all_reduce, (n-1)/n = 1/2 for the others at n = 2.
    EXPECT_NEAR(busbw, algbw * (rows[i].op == "all_reduce" ? 1.0 : 0.5), 1e-9 * algbw) << j.dump();
    // The table prints the same numbers, rounded.
    EXPECT_NEAR(rows[i].busbw, busbw, 0.006) << j.dump();
  }
  EXPECT_TRUE(doc.at("avg_busbw_gbs").contains("reduce_scatter")) << doc.dump();
}

TEST(BenchComm, TwoRanksInBf16AreExactWithFactorFourSizes) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on PATH";
  const auto r = sh(mpirun(2) +
                    " bench comm --dtype bf16 --min-bytes 2K --max-bytes 128K --factor 4 --iters 2 "
                    "--warmup 0 --ops all_gather,reduce_scatter");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 2u * 4u) << r.out;  // 2K 8K 32K 128K
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].op, i < 4 ? "all_gather" : "reduce_scatter") << r.out;
    EXPECT_EQ(rows[i].bytes, 2048LL << (2 * (i % 4))) << r.out;
    EXPECT_EQ(rows[i].type, "bf16");
    EXPECT_EQ(rows[i].count, rows[i].bytes / 2 / 2);
    EXPECT_EQ(rows[i].wrong, "0") << r.out;
  }
}

TEST(BenchComm, AWrongElementIsCountedOverTheRanksAndFailsTheRun) {
  const std::string flags = " bench comm --max-bytes 4K --iters 1 --warmup 0 --ops all_reduce";
  auto r = sh("ZT_TEST_BENCH_CORRUPT=1 " + zerotrain() + flags);
  EXPECT_EQ(r.rc, 1) << r.out;
  auto rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const Row& row : rows) EXPECT_EQ(row.wrong, "1") << r.out;
  EXPECT_HAS(r.out, "# wrong elements : 3 FAILED");

  r = sh(zerotrain() + flags + " --check off");
  EXPECT_EQ(r.rc, 0) << r.out;
  rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const Row& row : rows) EXPECT_EQ(row.wrong, "N/A") << r.out;

  if (!have_mpirun()) return;
  // Only the last rank's result is corrupted; rank 0 prints the sum over the ranks.
  r = sh("ZT_TEST_BENCH_CORRUPT=1 " + mpirun(2) + flags);
  EXPECT_NE(r.rc, 0) << r.out;
  rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const Row& row : rows) EXPECT_EQ(row.wrong, "1") << r.out;
}

TEST(BenchComm, BadFlagsExitTwoNamingTheFlag) {
  auto r = sh(zerotrain() + " bench comm --max-bytes banana");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "--max-bytes");
  EXPECT_HAS(r.out, "'banana'");
  EXPECT_HAS(r.out, "64K");  // the forms it takes

  r = sh(zerotrain() + " bench comm --ops all_reduce,all_to_all");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "--ops");
  EXPECT_HAS(r.out, "all_to_all");
  EXPECT_HAS(r.out, "reduce_scatter");  // the choices

  r = sh(zerotrain() + " bench comm --min-bytes 1M --max-bytes 1K");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "--min-bytes");

  r = sh(zerotrain() + " bench comm --dtype f16");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "--dtype");

  r = sh(zerotrain() + " bench comm --iters 0");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "--iters");

  // No benchmark, or an unknown one: the list, exit 2.
  r = sh(zerotrain() + " bench");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "comm");
  r = sh(zerotrain() + " bench allreduce");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "unknown benchmark 'allreduce'");
  EXPECT_HAS(r.out, "comm");
}

TEST(BenchComm, DeviceCudaRunsOnNcclOrExitsTwoWithoutAGpu) {
  const auto r = sh(zerotrain() + kQuick + " --device cuda");
  if (zt::cuda::available()) {
    // A GPU: one rank through NCCL, checked like the CPU path.
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_HAS(r.out, "# world size 1, backend nccl, device cuda:");
    expect_quick_sweep(table_rows(r.out), 1, r.out);
    return;
  }
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_HAS(r.out, "--device cuda");
  EXPECT_HAS(r.out, "--device cpu");  // the way out
  EXPECT_TRUE(table_rows(r.out).empty()) << r.out;
}

}  // namespace
