// core/fs.h: is_dir / is_file on real files, links and missing paths.
#include "core/fs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace zt {
namespace {

namespace stdfs = std::filesystem;

class FsPredicates : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = stdfs::temp_directory_path() / ("zt_fs_test_" + std::to_string(::getpid()));
    stdfs::remove_all(root_);
    stdfs::create_directories(root_ / "dir");
    std::ofstream(root_ / "file.txt") << "x";
  }
  void TearDown() override { stdfs::remove_all(root_); }
  std::string at(const char* name) const { return (root_ / name).string(); }
  stdfs::path root_;
};

TEST_F(FsPredicates, DirectoryAndFile) {
  EXPECT_TRUE(is_dir(at("dir")));
  EXPECT_FALSE(is_file(at("dir")));
  EXPECT_TRUE(is_file(at("file.txt")));
  EXPECT_FALSE(is_dir(at("file.txt")));
}

TEST_F(FsPredicates, MissingAndEmptyPaths) {
  EXPECT_FALSE(is_dir(at("missing")));
  EXPECT_FALSE(is_file(at("missing")));
  EXPECT_FALSE(is_dir(at("file.txt/below")));  // a file as a parent: ENOTDIR, no throw
  EXPECT_FALSE(is_file(""));
  EXPECT_FALSE(is_dir(""));
}

TEST_F(FsPredicates, LinksAreFollowed) {
  stdfs::create_symlink(root_ / "dir", root_ / "dir_link");
  stdfs::create_symlink(root_ / "file.txt", root_ / "file_link");
  stdfs::create_symlink(root_ / "missing", root_ / "dangling");
  EXPECT_TRUE(is_dir(at("dir_link")));
  EXPECT_TRUE(is_file(at("file_link")));
  EXPECT_FALSE(is_file(at("dangling")));
  EXPECT_FALSE(is_dir(at("dangling")));
}

}  // namespace
}  // namespace zt
