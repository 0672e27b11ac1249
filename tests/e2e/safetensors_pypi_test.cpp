// Interoperability with the PyPI `safetensors` package (the .venv of scripts/install_deps.sh):
// files zerotrain writes load there with the same values and metadata, PyPI re-saves them
// byte for byte identically, and files PyPI writes load here.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace zt;

namespace {

// This file's per-test scratch directory: build/test_tmp/st_pypi_<pid>_<test name>.
struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("st_pypi_")) {}
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs tools/safetensors_oracle.py; fails the test (with the script's output) on error.
void oracle(const std::string& args, const std::string& log) {
  const std::string cmd = std::string("'") + ZT_PYTHON3 + "' '" + ZT_TOOLS_DIR + "/safetensors_oracle.py' " + args +
                          " > '" + log + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << cmd << "\n"
                   << read_all(log) << "\n(the PyPI safetensors oracle needs the .venv: run scripts/install_deps.sh)";
}

double float_value(int64_t i) { return static_cast<double>(i % 97 - 40) * 0.25; }
int64_t int_value(int64_t i) { return (i % 97 - 40) * 1000003; }

}  // namespace

TEST(SafetensorsPypi, OurFilesLoadInPypiAndResaveIdentically) {
  TempDir dir;
  struct Spec {
    const char* name;
    Shape shape;
    DType dtype;
  };
  const Spec specs[] = {{"w.f32", {3, 5}, DType::F32}, {"w.bf16", {7}, DType::BF16},    {"w.f16", {2, 3}, DType::F16},
                        {"ids.i32", {4}, DType::I32},  {"ids.i64", {2, 2}, DType::I64}, {"empty", {0, 4}, DType::F32},
                        {"a.f16", {3}, DType::F16}};
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& s : specs) {
    owned.emplace_back(s.shape, s.dtype);
    Tensor t = owned.back();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (is_floating(s.dtype)) {
        t.set_f32(i, static_cast<float>(float_value(i)));
      } else if (s.dtype == DType::I32) {
        static_cast<int32_t*>(t.data())[i] = static_cast<int32_t>(int_value(i));
      } else {
        static_cast<int64_t*>(t.data())[i] = int_value(i);
      }
    }
    tensors.emplace_back(s.name, t);
  }
  const std::string ours = dir.file("ours.safetensors");
  io::save_safetensors(ours, tensors, {{"format", "pt"}, {"producer", "zerotrain"}});

  const std::string dump = dir.file("dump.json");
  oracle("dump '" + ours + "' '" + dump + "'", dir.file("log"));
  const nlohmann::json j = nlohmann::json::parse(read_all(dump));
  EXPECT_EQ(j["metadata"], (nlohmann::json{{"format", "pt"}, {"producer", "zerotrain"}}));
  ASSERT_EQ(j["tensors"].size(), std::size(specs));
  for (const auto& s : specs) {
    SCOPED_TRACE(s.name);
    const nlohmann::json& t = j["tensors"].at(s.name);
    EXPECT_EQ(t["dtype"], io::safetensors_dtype_name(s.dtype));
    EXPECT_EQ(t["shape"].get<Shape>(), s.shape);
    const int64_t n = shape_numel(s.shape);
    ASSERT_EQ(static_cast<int64_t>(t["values"].size()), n);
    for (int64_t i = 0; i < n; ++i) {
      if (is_floating(s.dtype)) {
        EXPECT_EQ(t["values"][i].get<double>(), float_value(i)) << i;  // exact in every float dtype
      } else {
        EXPECT_EQ(t["values"][i].get<int64_t>(), int_value(i)) << i;
      }
    }
  }

  // PyPI's writer lays the same tensors out byte for byte as ours.
  const std::string theirs = dir.file("theirs.safetensors");
  oracle("resave '" + ours + "' '" + theirs + "'", dir.file("log"));
  // The header is compared as JSON: PyPI serialises __metadata__ from a Rust HashMap, so
  // its key order varies from run to run; tensor entries and data bytes must be identical.
  auto split = [](const std::string& bytes) {
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    return std::make_pair(nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n));
  };
  const auto a = split(read_all(ours)), b = split(read_all(theirs));
  EXPECT_EQ(a.first, b.first) << "PyPI safetensors re-saved our header differently";
  EXPECT_EQ(a.second.size(), b.second.size());
  EXPECT_TRUE(a.second == b.second) << "PyPI safetensors laid out the data differently";
}

TEST(SafetensorsPypi, PypiFilesLoadHere) {
  TempDir dir;
  const std::string path = dir.file("pypi.safetensors");
  oracle("write '" + path + "'", dir.file("log"));
  io::SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"producer", "pypi"}}));
  const std::vector<std::string> expected_names = {"bf16", "empty", "f16", "f32", "i32", "i64"};
  EXPECT_EQ(r.names(), expected_names);
  const std::map<std::string, std::pair<Shape, DType>> expected = {
      {"f32", {{3, 5}, DType::F32}}, {"bf16", {{7}, DType::BF16}},  {"f16", {{2, 3}, DType::F16}},
      {"i32", {{4}, DType::I32}},    {"i64", {{2, 2}, DType::I64}}, {"empty", {{0, 4}, DType::F32}}};
  for (const auto& [name, sd] : expected) {
    SCOPED_TRACE(name);
    const Tensor t = r.tensor(name);
    EXPECT_EQ(t.shape(), sd.first);
    EXPECT_EQ(t.dtype(), sd.second);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (is_floating(t.dtype())) {
        EXPECT_EQ(t.get_f32(i), static_cast<float>(float_value(i))) << i;
      } else if (t.dtype() == DType::I32) {
        EXPECT_EQ(static_cast<const int32_t*>(t.data())[i], static_cast<int32_t>(int_value(i))) << i;
      } else {
        EXPECT_EQ(static_cast<const int64_t*>(t.data())[i], int_value(i)) << i;
      }
    }
  }
}
