#include "io/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace zt::io {
namespace {

std::string mib(uint64_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

std::string too_big(const std::string& path, uint64_t size, uint64_t cap, const std::string& what) {
  return str(path, ": ", size, " bytes, more than the ", mib(cap), " a ", what, " may have; is this the right file?");
}

}  // namespace

std::string file_kind_name(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a file";
}

InputFile::InputFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits until some process opens it for
  // writing (forever, for a mistaken path). It follows symlinks: a link to a regular file
  // is fine, a link to /dev/zero is refused below.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      ZT_THROW_INPUT(path, ": cannot open the ", what, " (", std::strerror(err), "); check the path");
    ZT_THROW_INPUT(path, ": cannot open the ", what, " (", std::strerror(err), ")");
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    ZT_THROW_IO(path, ": cannot stat the ", what, " (", std::strerror(err), ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    if (S_ISDIR(st.st_mode))
      ZT_THROW_INPUT(path, ": is a directory, but the ", what, " must be a file; name the file inside it");
    ZT_THROW_INPUT(path, ": not a regular file (it is ", file_kind_name(st.st_mode), "); the ", what,
                   " must be a regular file");
  }
  // Back to blocking reads (a regular file never blocks anyway; this keeps the descriptor
  // ordinary for whoever reads it).
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::read_all(uint64_t cap) {
  if (size_ > cap) ZT_THROW_INPUT(too_big(path_, size_, cap, what_));
  std::string text;
  text.reserve(static_cast<size_t>(size_));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ZT_THROW_IO(path_, ": cannot read the ", what_, " (", std::strerror(errno), ")");
    if (n == 0) break;
    // A file that grows after the open is read only until it passes the cap.
    if (text.size() + static_cast<size_t>(n) > cap)
      ZT_THROW_INPUT(path_, ": grew past the ", mib(cap), " a ", what_, " may have while being read");
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

uint64_t check_bounded_file(const std::string& path, const std::string& what, uint64_t cap) {
  const InputFile file(path, what);
  if (file.size() > cap) ZT_THROW_INPUT(too_big(path, file.size(), cap, what));
  return file.size();
}

std::string read_bounded_file(const std::string& path, const std::string& what, uint64_t cap) {
  InputFile file(path, what);
  return file.read_all(cap);
}

}  // namespace zt::io
