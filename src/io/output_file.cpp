#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/bounded_file.h"

namespace zt::io {
namespace fs = std::filesystem;

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

int access_flags(WriteOpen how) {
  switch (how) {
    case WriteOpen::Truncate:
      return O_WRONLY | O_CREAT | O_TRUNC;
    case WriteOpen::Append:
      return O_WRONLY | O_CREAT | O_APPEND;
    case WriteOpen::CreateNew:
      return O_WRONLY | O_CREAT | O_EXCL;
    case WriteOpen::ReadWrite:
      return O_RDWR | O_CREAT;
  }
  return O_WRONLY | O_CREAT | O_EXCL;
}

// What stands at `path` when opening it failed, in words (lstat: a link is named as such).
std::string failure_text(const std::string& path, int err) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      return "it is a symbolic link, and zerotrain never writes through a link (remove the link, or choose another "
             "path)";
    if (!S_ISREG(st.st_mode)) return "it is " + file_kind_name(st.st_mode) + ", not a regular file";
  }
  return std::strerror(err);
}

std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

int open_for_write_fd(const std::string& path, WriteOpen how, int extra_flags, mode_t mode, std::string* why) {
  // O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader forever; it
  // is cleared once the file is known to be regular.
  const int fd = ::open(path.c_str(), access_flags(how) | extra_flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
  if (fd < 0) {
    const int err = errno;
    if (why) *why = failure_text(path, err);
    errno = err;
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    if (why) *why = std::strerror(err);
    errno = err;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (why) *why = "it is " + file_kind_name(st.st_mode) + ", not a regular file";
    errno = ENXIO;  // not EINVAL: DirectFile reads that as "this filesystem has no O_DIRECT"
    return -1;
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

UniqueFd open_for_write(const std::string& path, WriteOpen how, const std::string& fix, mode_t mode) {
  std::string why;
  UniqueFd fd(open_for_write_fd(path, how, 0, mode, &why));
  if (!fd) ZT_THROW_INPUT(path, ": cannot open for writing: ", why, fix.empty() ? "" : "; ", fix);
  return fd;
}

std::FILE* open_file_for_write(const std::string& path, WriteOpen how, const std::string& fix) {
  UniqueFd fd = open_for_write(path, how, fix);
  // At the end, as fopen's "a" puts it: ftell then says whether the file was empty.
  if (how == WriteOpen::Append) ::lseek(fd.get(), 0, SEEK_END);
  std::FILE* f = ::fdopen(fd.get(), how == WriteOpen::Append ? "ab" : (how == WriteOpen::ReadWrite ? "r+b" : "wb"));
  if (!f) ZT_THROW_IO(path, ": cannot open a stream on it (", std::strerror(errno), ")");
  fd.release();  // the stream owns it now
  return f;
}

void probe_writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  const fs::path p(dir);
  if (!fs::is_directory(p, ec)) {
    fs::create_directories(p, ec);
    if (ec || !fs::is_directory(p, ec)) {
      std::string why = ec ? ec.message() : "not a directory";
      // The part of the path that stands in the way, named.
      for (fs::path up = p; !up.empty() && up != up.parent_path(); up = up.parent_path()) {
        std::error_code sec;
        const fs::file_status st = fs::symlink_status(up, sec);
        if (fs::exists(st)) {
          if (fs::is_symlink(st) && !fs::exists(fs::status(up, sec)))
            why = "'" + up.string() + "' is a symbolic link to something missing";
          else if (!fs::is_directory(fs::status(up, sec)))
            why = "'" + up.string() + "' is not a directory";
          break;
        }
      }
      ZT_THROW_INPUT(what, ": cannot create the folder '", dir, "' (", why,
                     "): fix the path or its permissions before the run starts");
    }
  }
#ifdef O_TMPFILE
  const int tmp = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (tmp >= 0) {
    ::close(tmp);
    return;
  }
  const int tmp_err = errno;
  if (tmp_err != EOPNOTSUPP && tmp_err != EISDIR && tmp_err != EINVAL)
    ZT_THROW_INPUT(what, ": cannot write in '", dir, "' (", std::strerror(tmp_err),
                   "): make it writable (or choose another folder) before the run starts");
#endif
  const std::string probe = (p / str(".zerotrain-probe-", ::getpid())).string();
  std::string why;
  const int fd = open_for_write_fd(probe, WriteOpen::CreateNew, 0, 0600, &why);
  if (fd < 0)
    ZT_THROW_INPUT(what, ": cannot write in '", dir, "' (", why,
                   "): make it writable (or choose another folder) before the run starts");
  ::close(fd);
  ::unlink(probe.c_str());
}

// ---- marked folders ----

namespace {

std::string marker_text(long pid) { return "zerotrain staging folder\npid " + std::to_string(pid) + "\n"; }

}  // namespace

void create_marked_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0)
    ZT_THROW_IO(path, ": cannot create the temporary folder (", std::strerror(errno), ")");
  const std::string marker = path + "/" + kStagingMarker;
  const std::string text = marker_text(::getpid());
  std::string why;
  const int fd = open_for_write_fd(marker, WriteOpen::CreateNew, 0, 0644, &why);
  const bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) {
    ::unlink(marker.c_str());
    ::rmdir(path.c_str());
    ZT_THROW_IO(path, ": cannot write the temporary folder's marker (", fd < 0 ? why : std::strerror(err), ")");
  }
}

std::optional<long> marked_dir_owner(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  const std::string marker = path + "/" + kStagingMarker;
  const int fd = ::open(marker.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  char buf[128] = {};
  struct stat ms {};
  ssize_t n = -1;
  if (::fstat(fd, &ms) == 0 && S_ISREG(ms.st_mode) && ms.st_size < static_cast<off_t>(sizeof buf))
    n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const std::string text(buf, static_cast<size_t>(n));
  const std::string head = "zerotrain staging folder\npid ";
  if (text.compare(0, head.size(), head) != 0) return std::nullopt;
  char* end = nullptr;
  const long pid = std::strtol(text.c_str() + head.size(), &end, 10);
  if (end == text.c_str() + head.size() || pid <= 0 || text != marker_text(pid)) return std::nullopt;
  return pid;
}

bool remove_empty_dir(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::rmdir(path.c_str()) == 0;
}

long pid_in_temp_name(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() + 1 || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '-')
    return -1;
  const char* p = name.c_str() + prefix.size() + 1;
  const char* digits = p;
  while (*p >= '0' && *p <= '9') ++p;
  if (p == digits || *p != '-' || p - digits > 18) return -1;
  const long pid = std::strtol(digits, nullptr, 10);
  const char* n = ++p;
  while (*p >= '0' && *p <= '9') ++p;
  if (p == n || *p != '\0') return -1;
  return pid;
}

// ---- atomic files ----

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    ZT_THROW_INPUT(path, ": cannot replace it: ", failure_text(path, EINVAL));
  const std::string folder = str(path, ".tmp-", ::getpid(), "-", g_temp_counter++);
  create_marked_dir(folder);
  const std::string tmp = folder + "/" + fs::path(path).filename().string();
  auto discard = [&] {
    std::error_code ec;
    fs::remove_all(folder, ec);
  };
  std::string why;
  const int fd = open_for_write_fd(tmp, WriteOpen::CreateNew, 0, 0644, &why);
  if (fd < 0) {
    discard();
    ZT_THROW_IO(path, ": cannot create temporary file ", tmp, " (", why, ")");
  }
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    discard();
    ZT_THROW_IO(path, ": cannot open a stream on ", tmp);
  }
  try {
    write(f);
    if (std::fflush(f) != 0 || std::ferror(f)) ZT_THROW_IO(path, ": write failed (", std::strerror(errno), ")");
    if (::fsync(::fileno(f)) != 0) ZT_THROW_IO(path, ": fsync failed (", std::strerror(errno), ")");
  } catch (...) {
    std::fclose(f);
    discard();
    throw;
  }
  if (std::fclose(f) != 0) {
    const std::string err = std::strerror(errno);
    discard();
    ZT_THROW_IO(path, ": closing ", tmp, " failed (", err, ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    discard();
    ZT_THROW_IO(path, ": cannot rename ", tmp, " into place (", err, ")");
  }
  discard();  // the marker and the emptied folder
}

void copy_file_atomic(const std::string& src, const std::string& dst) {
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (in < 0 || ::fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (in >= 0) ::close(in);
    ZT_THROW_INPUT(src, ": no such file (to copy to ", dst, ")");
  }
  const UniqueFd owned(in);
  write_file_atomic(dst, [&](std::FILE* f) {
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(in, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) ZT_THROW_IO(src, ": read failed (", std::strerror(errno), ")");
      if (n == 0) break;
      if (std::fwrite(buf, 1, static_cast<size_t>(n), f) != static_cast<size_t>(n))
        ZT_THROW_IO(dst, ": write failed (", std::strerror(errno), ")");
    }
  });
}

}  // namespace zt::io
