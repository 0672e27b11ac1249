// Every file zerotrain writes is opened here, and every temporary it leaves behind on a
// crash is a folder that says it is ours.
//
// - Opening for writing never follows a symbolic link (O_NOFOLLOW) and never writes into
//   anything but a regular file: a link planted at an output name (`.zerotrain.lock` ->
//   someone's file) would otherwise have that file truncated or overwritten. Opening is
//   non-blocking, so a FIFO at an output name is refused instead of hanging.
// - A marked folder is a directory holding the marker file `.zerotrain-staging` with the
//   creating process's pid. Stale-temporary clean-ups (io/staging_dir.h, the checkpoint
//   root's, the NVMe swap folders') delete a folder only when it carries the marker: a
//   user's folder that happens to match a name pattern (`hf.old-2024-01-15`) is never ours.
//   A kill between the folder's mkdir and its marker leaves an empty unmarked folder: the
//   clean-ups remove such a folder only with rmdir, which removes nothing but an empty
//   directory (remove_empty_dir).
#pragma once
#include <sys/types.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace zt::io {

enum class WriteOpen {
  Truncate,   // create or empty (O_TRUNC)
  Append,     // create or append (O_APPEND)
  CreateNew,  // create; fail when the name exists (O_EXCL): temporaries and markers
  ReadWrite,  // create or open as is, read and write (lock files, swap files)
};

// An owned file descriptor, closed when it goes.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// The one place a file is opened for writing: O_NOFOLLOW | O_CLOEXEC plus `extra_flags`
// (O_DIRECT, ...), and only a regular file is accepted. Returns the descriptor, or -1 with
// errno set (ELOOP: `path` is a symbolic link; EINVAL from the kernel, e.g. O_DIRECT
// refused) and `why` (when given) saying what is wrong in words.
int open_for_write_fd(const std::string& path, WriteOpen how, int extra_flags = 0, mode_t mode = 0644,
                      std::string* why = nullptr);

// The same, throwing BadInput (exit 2) naming `path`, what is wrong and `fix` (what the
// user can do, e.g. "set logging_dir to a writable folder").
UniqueFd open_for_write(const std::string& path, WriteOpen how, const std::string& fix = "", mode_t mode = 0644);
// As a stdio stream (the caller fcloses it).
std::FILE* open_file_for_write(const std::string& path, WriteOpen how, const std::string& fix = "");

// Creates `path` atomically: `write` fills a temporary file, which is flushed, fsync'ed and
// renamed over `path`. The temporary lives in a marked folder `<path>.tmp-<pid>-<n>` beside
// `path` (created with O_EXCL | O_NOFOLLOW), so a killed write leaves something the next
// run's clean-up (remove_stale_atomic_temps) knows to be ours. Refuses (BadInput) a `path`
// that is a symbolic link or not a regular file. Throws Io on failure (and removes the
// temporary); an exception from `write` propagates after the same clean-up.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write);

// Copies a regular file (atomically, as write_file_atomic). Throws BadInput when `src` is
// missing, Io on write errors.
void copy_file_atomic(const std::string& src, const std::string& dst);

// Whether this process can create files in `dir` (created, with its parents, when missing):
// a real attempt (an unnamed O_TMPFILE file, else a marker-named file created and removed
// at once), since permission bits say nothing for root and nothing about a read-only
// mount. BadInput (exit 2) naming `dir`, `what` writes there, and why not.
void probe_writable_dir(const std::string& dir, const std::string& what);

// ---- marked folders ----

constexpr const char* kStagingMarker = ".zerotrain-staging";

// mkdir `path` (it must not exist) and write its marker naming this process. Throws Io.
void create_marked_dir(const std::string& path);
// The pid a marked folder's marker names; nullopt when `path` is not a directory (a link
// to one does not count) or carries no well-formed marker: then it is not ours.
std::optional<long> marked_dir_owner(const std::string& path);

// Removes `path` when it is an empty directory (rmdir: nothing else can go), returns
// whether it did. For a folder named like one of ours but without the marker: a kill
// between the folder's mkdir and its marker leaves it so, empty; one that holds anything
// is not ours and stays.
bool remove_empty_dir(const std::string& path);

// `<prefix>-<pid>-<n>`: the pid, or -1 when `name` does not have that form (digits only).
long pid_in_temp_name(const std::string& name, const std::string& prefix);

}  // namespace zt::io
