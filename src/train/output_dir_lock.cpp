#include "train/output_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "io/output_file.h"

namespace zt::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".zerotrain.lock";

// The pid a lock file names ("" when unreadable: a holder that has not written it yet).
std::string read_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

[[noreturn]] void throw_held(const fs::path& dir, const fs::path& lock, int fd) {
  const std::string pid = read_pid(fd);
  ZT_THROW_INPUT("output_dir '", dir.string(), "' is in use by another zerotrain run (pid ",
                 pid.empty() ? std::string("unknown") : pid, ", lock file ", lock.string(),
                 "): wait for it to finish or stop it, or give this run another output_dir");
}

// Whether another process holds dir's lock; when it does, throws naming it. Opens an
// existing lock file only, so a refused run creates nothing.
void refuse_if_held(const fs::path& dir) {
  const fs::path lock = dir / kLockName;
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    try {
      throw_held(dir, lock, fd);
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  ::close(fd);  // releases the probe's lock, if it got one
}

}  // namespace

std::vector<std::string> previous_run_files(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  const fs::path ckpt = dir / "checkpoints";
  if (fs::is_directory(ckpt, ec) && !fs::is_empty(ckpt, ec)) found.push_back("checkpoints/");
  if (fs::exists(dir / "final", ec)) found.push_back("final/");
  // An empty metrics.jsonl is a run that stopped before its first step (a start-up
  // error): no run to protect, and counting it would refuse that run's own retry.
  const fs::path metrics = dir / "metrics.jsonl";
  if (fs::exists(fs::symlink_status(metrics, ec)) && !(fs::is_regular_file(metrics, ec) && fs::is_empty(metrics, ec)))
    found.push_back("metrics.jsonl");
  return found;
}

OutputDirLock::OutputDirLock(const fs::path& dir) : path_(dir / kLockName) {
  // Never through a link: `.zerotrain.lock` -> someone's file would have it truncated.
  std::string why;
  fd_ = io::open_for_write_fd(path_.string(), io::WriteOpen::ReadWrite, 0, 0644, &why);
  if (fd_ < 0)
    ZT_THROW_INPUT("cannot create the lock file '", path_.string(), "': ", why,
                   "; or give this run another output_dir");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    try {
      if (err == EWOULDBLOCK) throw_held(dir, path_, fd_);
      ZT_THROW_IO("cannot lock '", path_.string(), "': ", std::strerror(err));
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
  // The pid, for the message of a second run (advisory: the flock is what excludes).
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    ZT_WARN("could not write this run's pid into ", path_.string(), " (", std::strerror(errno),
            "): a second run there is still refused, without the pid");
}

OutputDirLock::~OutputDirLock() {
  if (fd_ < 0) return;
  // Emptied, not removed: removing a lock file lets a third run lock a new inode while a
  // second one still waits on the old (the lock goes with the file, not the name).
  if (::ftruncate(fd_, 0) != 0) {
    // Nothing to do: the stale pid is only read while the file is locked.
  }
  ::close(fd_);
}

std::unique_ptr<OutputDirLock> claim_output_dir(const fs::path& dir, OutputDirUse use) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    ZT_THROW_INPUT("output_dir '", dir.string(), "' is not a directory: give a directory path");
  refuse_if_held(dir);
  const std::vector<std::string> previous = previous_run_files(dir);
  if (use == OutputDirUse::Fresh && !previous.empty()) {
    std::string list;
    for (const std::string& f : previous) list += (list.empty() ? "" : ", ") + f;
    ZT_THROW_INPUT("output_dir '", dir.string(), "' holds a previous run (", list,
                   "); nothing was changed: continue it with --resume latest (or --resume auto), replace it with "
                   "--overwrite_output_dir, or give this run another output_dir");
  }
  fs::create_directories(dir, ec);
  if (ec) ZT_THROW_INPUT("cannot create output_dir '", dir.string(), "': ", ec.message());
  auto lock = std::make_unique<OutputDirLock>(dir);
  if (use == OutputDirUse::Overwrite && !previous.empty()) {
    // Under the lock, so no other run is writing what is removed.
    for (const std::string& f : previous) {
      const std::string name = f.back() == '/' ? f.substr(0, f.size() - 1) : f;
      fs::remove_all(dir / name, ec);
      if (ec) ZT_THROW_IO("--overwrite_output_dir: cannot remove '", (dir / f).string(), "': ", ec.message());
    }
    ZT_INFO("overwrite_output_dir: removed the previous run's files in ", dir.string());
  }
  return lock;
}

}  // namespace zt::train
