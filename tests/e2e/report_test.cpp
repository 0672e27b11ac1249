// `zerotrain report` from the shell: the table names every section and key a bug report
// needs, --json is one parseable object with the same keys, every ZT_* variable of the
// table (core/env_vars.h) is listed with its current value, and a bad flag exits 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/env_vars.h"

namespace {

struct Result {
  int rc;
  std::string out;
};

// stdout only (stderr to the test log), so --json output parses as it is.
Result run(const std::string& args, const std::string& env_prefix = "") {
  const std::string bin = std::string(ZT_BINARY_DIR) + "/zerotrain";
  Result r{-1, ""};
  FILE* p = ::popen((env_prefix + bin + " " + args).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The keys every report has, whatever the build and machine.
const std::vector<std::pair<std::string, std::vector<std::string>>> kRequired = {
    {"zerotrain", {"version", "git_commit", "build_type", "compiler", "cxx_standard", "cxx_flags"}},
    {"cuda", {"compiled", "toolkit", "cublas", "cublaslt", "gpus"}},
    {"cpu", {"model", "logical_cpus", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "build_needs"}},
    {"blas", {"library", "config", "threads"}},
    {"openmp", {"version", "zerotrain_threads"}},
    {"features", {"cuda", "sentencepiece", "pcre2", "yaml_cpp", "nccl", "mpi"}},
};

void require_binary() {
  const std::string bin = std::string(ZT_BINARY_DIR) + "/zerotrain";
  ASSERT_EQ(::access(bin.c_str(), X_OK), 0) << "build the zerotrain target first";
}

}  // namespace

TEST(ReportCli, TableHasEverySectionAndKey) {
  require_binary();
  const Result r = run("report");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string text = "\n" + r.out;
  for (const auto& [section, keys] : kRequired) {
    EXPECT_NE(text.find("\n" + section + "\n"), std::string::npos) << "no section " << section << " in:\n" << r.out;
    for (const auto& k : keys) EXPECT_NE(r.out.find("  " + k + " "), std::string::npos) << "no key " << k;
  }
  // The version is the one `zerotrain version` prints.
  const Result v = run("version");
  ASSERT_EQ(v.rc, 0);
  const std::string version = v.out.substr(v.out.rfind(' ') + 1, v.out.find('\n') - v.out.rfind(' ') - 1);
  const size_t at = text.find("\n  version ");
  ASSERT_NE(at, std::string::npos);
  const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  EXPECT_EQ(line.substr(line.find_last_of(' ') + 1), version) << line;
}

TEST(ReportCli, JsonParsesWithTheSameKeys) {
  require_binary();
  const Result r = run("report --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  ASSERT_TRUE(j.is_object());
  for (const auto& [section, keys] : kRequired) {
    ASSERT_TRUE(j.contains(section) && j[section].is_object()) << "no section " << section;
    for (const auto& k : keys) EXPECT_TRUE(j[section].contains(k)) << section << "." << k;
  }
  EXPECT_TRUE(j["cuda"]["compiled"].is_boolean());
  EXPECT_EQ(j["features"]["cuda"], j["cuda"]["compiled"]);
  ASSERT_TRUE(j["cuda"]["gpus"].is_number_integer());
  const int gpus = j["cuda"]["gpus"].get<int>();
  for (int i = 0; i < gpus; ++i) {
    const auto& g = j["cuda"]["gpu" + std::to_string(i)];
    EXPECT_TRUE(g.is_object() && g.contains("name") && g.contains("memory_bytes")) << g.dump();
  }
  if (!j["cuda"]["compiled"].get<bool>()) {
    EXPECT_EQ(gpus, 0);
    EXPECT_EQ(j["cuda"]["toolkit"], "not built");
  }
  for (const char* lib : {"nccl", "mpi"})
    EXPECT_TRUE(j["features"][lib] == "not built" || j["features"][lib] == true) << lib;
  EXPECT_TRUE(j["cpu"]["avx2"].is_boolean() || j["cpu"]["avx2"] == "unknown");
  EXPECT_GE(j["openmp"]["zerotrain_threads"].get<int>(), 1);
  EXPECT_EQ(j["zerotrain"]["cxx_standard"].get<std::string>().rfind("C++17", 0), 0u);
}

TEST(ReportCli, ListsEveryEnvironmentVariableWithItsValue) {
  require_binary();
  // One set, the others as the test's environment has them (normally unset).
  const Result set = run("report --json", "env ZT_PEAK_TFLOPS=123.5 ");
  ASSERT_EQ(set.rc, 0) << set.out;
  const nlohmann::json j = nlohmann::json::parse(set.out);
  ASSERT_TRUE(j.contains("environment")) << set.out;
  const nlohmann::json& env = j["environment"];
  EXPECT_EQ(env.size(), zt::env_var_table().size());
  for (const zt::EnvVarSpec& spec : zt::env_var_table()) {
    ASSERT_TRUE(env.contains(spec.name)) << spec.name;
    const char* here = std::getenv(spec.name);
    if (spec.var == zt::EnvVar::PeakTflops) {
      EXPECT_EQ(env[spec.name], "123.5");
    } else if (here == nullptr) {
      EXPECT_TRUE(env[spec.name].is_null()) << spec.name;
    } else {
      EXPECT_EQ(env[spec.name], here) << spec.name;
    }
  }
  const Result table = run("report");
  ASSERT_EQ(table.rc, 0);
  EXPECT_NE(table.out.find("\nenvironment\n"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("  ZT_TEST_FAIL_AT "), std::string::npos) << table.out;
}

TEST(ReportCli, UnknownFlagIsAUsageError) {
  require_binary();
  const Result r = run("report --jsn 2>/dev/null");
  EXPECT_EQ(r.rc, 2);
}
