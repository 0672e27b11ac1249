// A full disk for the writers under test, without a test hook in them: RLIMIT_FSIZE caps
// the size of any file this process writes (a write crossing it is cut short, the next one
// fails with EFBIG, as a full disk cuts a write and fails with ENOSPC), and SIGXFSZ is
// ignored so the failure is an errno, not the end of the test. Restored however the scope ends.
#pragma once
#include <sys/resource.h>

#include <csignal>
#include <cstdint>

namespace zt::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit now = old_;
    now.rlim_cur = static_cast<rlim_t>(bytes);
    ::setrlimit(RLIMIT_FSIZE, &now);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
};

}  // namespace zt::testing
