// io::read_bounded_file, the one reader of config files: a regular file under the cap is
// read whole; a directory, a device that never ends (/dev/zero), a FIFO, a missing path
// and an oversized file are BadInput errors (exit 2) naming the path.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "common/temp_dir.h"
#include "core/error.h"
#include "io/bounded_file.h"

namespace zt::io {
namespace {

struct TempDir : zt::testing::TempDir {
  TempDir() : zt::testing::TempDir(zt::testing::build_temp_path("bounded_file_")) {}
};

std::string error_of(const std::string& path, uint64_t cap = kConfigFileCap) {
  try {
    read_bounded_file(path, "run config", cap);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << path << ": read without an error";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(BoundedFile, ReadsARegularFileWhole) {
  TempDir dir;
  const std::string text = std::string("a: 1\n") + std::string(100000, '#') + "\n";
  EXPECT_EQ(read_bounded_file(dir.write("run.yaml", text), "run config"), text);
  EXPECT_EQ(read_bounded_file(dir.write("empty.yaml", ""), "run config"), "");
  // Exactly the cap is fine; one byte more is not.
  EXPECT_EQ(read_bounded_file(dir.write("cap.yaml", "12345"), "run config", 5), "12345");
  EXPECT_HAS(error_of(dir.write("over.yaml", "123456"), 5), "6 bytes, more than");
}

TEST(BoundedFile, RefusesDirectoriesDevicesFifosAndMissingPaths) {
  TempDir dir;
  EXPECT_HAS(error_of(dir.path().string()), "is a directory");
  EXPECT_HAS(error_of("/dev/zero"), "not a regular file");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_HAS(error_of(fifo), "not a regular file");  // never blocks on the open
  EXPECT_HAS(error_of(dir.file("missing.yaml")), "cannot open the run config");
}

}  // namespace
}  // namespace zt::io
