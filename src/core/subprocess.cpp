#include "core/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace zt {
namespace {

// A file descriptor closed however the scope ends.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// posix_spawn_file_actions_t, destroyed however the scope ends.
class FileActions {
 public:
  FileActions() { ok_ = ::posix_spawn_file_actions_init(&actions_) == 0; }
  ~FileActions() {
    if (ok_) ::posix_spawn_file_actions_destroy(&actions_);
  }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  bool ok() const { return ok_; }
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_{};
  bool ok_ = false;
};

// The started child, reaped however the scope ends (no zombie on an exception); the
// result's wait, when it comes first, makes this a no-op.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ > 0) wait_status();
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  int wait_status() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string ProgramResult::describe() const {
  switch (ended) {
    case Ended::Exited:
      return "exit code " + std::to_string(code);
    case Ended::Signalled:
      return "killed by signal " + std::to_string(code);
    case Ended::NotStarted:
      return std::string("could not start (") + std::strerror(code) + ")";
  }
  return "?";
}

std::string find_program(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : "";
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    // An empty PATH entry is the current directory, as for a shell.
    const std::string dir = end == begin ? "." : dirs.substr(begin, end - begin);
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    begin = end + 1;
  }
  return "";
}

ProgramResult run_program(const std::vector<std::string>& argv, size_t output_cap) {
  ProgramResult r;
  if (argv.empty()) {
    r.code = EINVAL;
    return r;
  }
  int ends[2];
  // Close-on-exec: a program started by another thread at the same time must not inherit
  // the write end (its copy would keep the pipe open and this read from ending).
  if (::pipe2(ends, O_CLOEXEC) != 0) {
    r.code = errno;
    return r;
  }
  Fd read_end(ends[0]), write_end(ends[1]);
  FileActions actions;
  if (!actions.ok() || ::posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null", O_RDONLY, 0) != 0 ||
      ::posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDOUT_FILENO) != 0 ||
      ::posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDERR_FILENO) != 0) {
    r.code = ENOMEM;
    return r;
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], actions.get(), nullptr, args.data(), environ);
  if (rc != 0) {
    r.code = rc;
    return r;
  }
  Child child(pid);
  write_end.reset();  // the child's copy is the only one left: EOF when it ends
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    // Read to the end whatever the cap (a child blocked on a full pipe never exits).
    const size_t room = output_cap > r.output.size() ? output_cap - r.output.size() : 0;
    const size_t keep = std::min(room, static_cast<size_t>(n));
    r.output.append(buf, keep);
    if (keep < static_cast<size_t>(n)) r.truncated = true;
  }
  read_end.reset();
  const int status = child.wait_status();
  if (WIFEXITED(status)) {
    r.ended = ProgramResult::Ended::Exited;
    r.code = WEXITSTATUS(status);
  } else {
    r.ended = ProgramResult::Ended::Signalled;
    r.code = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  return r;
}

}  // namespace zt
