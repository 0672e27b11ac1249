// io/bounded_file.h, the one guard of files read from user-given paths: a regular file
// under the cap is read whole; a directory, a device that never ends (/dev/zero), a FIFO, a
// missing path and an oversized file are BadInput errors (exit 2) naming the path and what
// it is. The other readers of such paths (data files, token shards, a checkpoint folder's
// `latest`) refuse a FIFO and /dev/zero the same way. A FIFO's open must not block: each
// FIFO case runs under a watchdog that releases a blocked open after 20 s, so a regression
// fails instead of hanging the suite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "common/temp_dir.h"
#include "core/error.h"
#include "checkpoint/checkpoint.h"
#include "io/bounded_file.h"
#include "io/data_format.h"
#include "io/mmap.h"

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

// While alive, a thread that opens `fifo` for writing after 20 s if the test has not
// finished: a reader blocked in open() then returns, and the test fails (blocked()).
class FifoWatchdog {
 public:
  explicit FifoWatchdog(std::string fifo) : fifo_(std::move(fifo)), thread_([this] { watch(); }) {}
  ~FifoWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool blocked() const { return blocked_; }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::seconds(20), [this] { return done_; })) return;
    blocked_ = true;
    const int fd = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK);  // succeeds only for a waiting reader
    if (fd >= 0) ::close(fd);
  }
  std::string fifo_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> blocked_{false};
  std::thread thread_;
};

template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  return "no error";
}

TEST(BoundedFile, RefusesDirectoriesDevicesFifosAndMissingPaths) {
  TempDir dir;
  EXPECT_HAS(error_of(dir.path().string()), "is a directory");
  EXPECT_HAS(error_of("/dev/zero"), "/dev/zero: not a regular file (it is a character device); the run config");
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  {
    const FifoWatchdog watchdog(fifo);
    EXPECT_HAS(error_of(fifo), "not a regular file (it is a FIFO)");
    EXPECT_HAS(input_error([&] { check_bounded_file(fifo, "tokenizer file"); }), "it is a FIFO); the tokenizer file");
    EXPECT_FALSE(watchdog.blocked()) << "open() of a FIFO blocked";
  }
  EXPECT_HAS(error_of(dir.file("missing.yaml")), "cannot open the run config");
  // A link to a device is the device.
  std::filesystem::create_symlink("/dev/zero", dir.file("zero.yaml"));
  EXPECT_HAS(error_of(dir.file("zero.yaml")), "it is a character device");
}

TEST(BoundedFile, DataFilesAndTokenShardsRefuseFifosAndDevices) {
  TempDir dir;
  const std::string fifo = dir.file("shard.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const FifoWatchdog watchdog(fifo);
  EXPECT_HAS(input_error([&] { detect_data_format(fifo); }), fifo + ": not a regular file (it is a FIFO)");
  EXPECT_HAS(input_error([&] { detect_data_format("/dev/zero"); }), "/dev/zero: not a regular file (it is a character");
  EXPECT_HAS(input_error([&] { MappedFile m(fifo); }), fifo + ": not a regular file (it is a FIFO)");
  EXPECT_HAS(input_error([&] { MappedFile m("/dev/zero"); }), "(it is a character device)");
  EXPECT_FALSE(watchdog.blocked()) << "open() of a FIFO blocked";
}

TEST(BoundedFile, ALatestFileThatIsAFifoOrDevZeroIsAProblemNamingIt) {
  TempDir dir;
  const std::string latest = dir.file("latest");
  ASSERT_EQ(::mkfifo(latest.c_str(), 0600), 0);
  {
    const FifoWatchdog watchdog(latest);
    EXPECT_HAS(input_error([&] { checkpoint::resolve_checkpoint(dir.path().string(), "latest"); }),
               latest + ": not a regular file (it is a FIFO)");
    EXPECT_EQ(checkpoint::resolve_checkpoint_auto(dir.path().string()), "");  // nothing to resume: a fresh start
    EXPECT_FALSE(watchdog.blocked()) << "open() of a FIFO blocked";
  }
  std::filesystem::remove(latest);
  std::filesystem::create_symlink("/dev/zero", latest);
  EXPECT_HAS(input_error([&] { checkpoint::resolve_checkpoint(dir.path().string(), "latest"); }),
             "(it is a character device)");
}

}  // namespace
}  // namespace zt::io
