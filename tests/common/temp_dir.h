// Per-test scratch directories for the tests that write files.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace zt::testing {

// Name of the running GoogleTest test, to make scratch paths unique per test.
inline std::string current_test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// <build>/test_tmp/<prefix><pid>_<test name>: the scratch path of TempDir's build-tree tests.
inline std::filesystem::path build_temp_path(const std::string& prefix) {
  return std::filesystem::path(ZT_BINARY_DIR) / "test_tmp" /
         (prefix + std::to_string(::getpid()) + "_" + current_test_name());
}

// <system temp>/<prefix><gtest random seed>_<test name>: the scratch path of the config tests.
inline std::filesystem::path system_temp_path(const std::string& prefix) {
  return std::filesystem::temp_directory_path() /
         (prefix + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" + current_test_name());
}

// <build>/test_tmp/<prefix><name>_<pid>, emptied and created: a named scratch dir the caller keeps.
inline std::filesystem::path fresh_test_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::path(ZT_BINARY_DIR) / "test_tmp" / (prefix + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// <memory-backed temp>/<prefix><pid>_<test name>: scratch for the NVMe-offload tests, whose
// point is the swapping logic, not the drive: /dev/shm (tmpfs, which takes O_DIRECT since
// Linux 6.6, else buffered) keeps them fast on a shared CI disk; the build tree otherwise.
inline std::filesystem::path swap_temp_path(const std::string& prefix) {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0)
    return std::filesystem::path("/dev/shm") / (prefix + std::to_string(::getpid()) + "_" + current_test_name());
  return build_temp_path(prefix);
}

// A scratch directory created on construction (cleared first when asked) and removed on destruction.
class TempDir {
 public:
  explicit TempDir(std::filesystem::path path, bool clear_first = true) : path_(std::move(path)) {
    if (clear_first) std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Path of a file in the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // The directory itself.
  const std::filesystem::path& path() const { return path_; }
  // Writes text to a file in the directory and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace zt::testing
