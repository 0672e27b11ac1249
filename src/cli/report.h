// `zerotrain report`: the build and the machine it runs on, as DeepSpeed's `ds_report`
// and `accelerate env` show them, for bug reports and for checking an install: version
// and commit, compiler and flags, CUDA (toolkit, driver, GPUs, cuBLAS), the CPU and its
// vector features, BLAS, OpenMP, optional components (NCCL, MPI, SentencePiece, ...), and
// every ZT_* environment variable (core/env_vars.h) with its value.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt::cli {

struct ReportItem {
  std::string key;       // snake_case; the same in the table and the JSON
  nlohmann::json value;  // string, number, bool or object (one GPU)
  std::string text;      // how the table shows it ("" = from value; booleans as yes/no)
};

struct ReportSection {
  std::string name;  // zerotrain, cuda, cpu, blas, openmp, features, system, environment
  std::vector<ReportItem> items;
};

// Gathers the report. Never throws for a missing driver or an unreadable /proc file:
// such values read "unknown" (a report must work on a broken install).
std::vector<ReportSection> environment_report();

// Sections as headings, then "  key   value" lines with the values aligned.
std::string report_table(const std::vector<ReportSection>& report);
// {"section": {"key": value, ...}, ...} in the table's order.
nlohmann::ordered_json report_json(const std::vector<ReportSection>& report);

}  // namespace zt::cli
