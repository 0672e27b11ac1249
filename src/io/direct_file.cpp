#include "io/direct_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/allocator.h"
#include "core/error.h"
#include "core/fail_point.h"
#include "core/memory_info.h"
#include "io/output_file.h"

namespace zt::io {

DirectFile::DirectFile(const std::string& path, FileAccess access) : path_(path) {
  // Reading: a plain open (O_NOFOLLOW too: every file here is one zerotrain created).
  // Writing: through io/output_file.h, never following a link nor writing a non-file.
  const auto open_with = [&](int extra, std::string* why) {
    if (access == FileAccess::Read) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | extra);
      if (fd < 0 && why) *why = std::strerror(errno);
      return fd;
    }
    return open_for_write_fd(path, WriteOpen::ReadWrite, extra, 0600, why);
  };
  std::string why;
  fd_ = open_with(O_DIRECT, &why);
  if (fd_ < 0 && errno == EINVAL) {
    // The filesystem has no O_DIRECT (tmpfs): buffered, and the caller warns once.
    fallback_reason_ = "the filesystem of " + path + " does not support O_DIRECT";
    mode_ = IoMode::Buffered;
    fd_ = open_with(0, &why);
  }
  if (fd_ < 0) {
    const int err = errno;
    const std::string dir = std::filesystem::path(path).parent_path().string();
    ZT_THROW_INPUT(path, ": cannot open for ", access == FileAccess::Read ? "reading" : "writing", ": ", why,
                   err == ENOENT && access == FileAccess::Read ? "" : "; check that " + dir + " exists and is writable",
                   " (nvme_path must name a writable folder on a local drive)");
  }
}

DirectFile::~DirectFile() { close(); }

DirectFile::DirectFile(DirectFile&& other) noexcept
    : fd_(other.fd_),
      mode_(other.mode_),
      path_(std::move(other.path_)),
      fallback_reason_(std::move(other.fallback_reason_)) {
  other.fd_ = -1;
}

DirectFile& DirectFile::operator=(DirectFile&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    mode_ = other.mode_;
    path_ = std::move(other.path_);
    fallback_reason_ = std::move(other.fallback_reason_);
    other.fd_ = -1;
  }
  return *this;
}

void DirectFile::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void DirectFile::reserve(uint64_t bytes) {
  const std::optional<uint64_t> pretended = simulated_drive_free();
  const int rc = pretended && *pretended < bytes ? ENOSPC : ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (rc == 0) return;
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) == 0) return;
  }
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  ZT_THROW_INPUT(path_, ": cannot reserve ", bytes_str(static_cast<double>(bytes)), ": ",
                 std::strerror(rc == 0 ? errno : rc), " (", bytes_str(static_cast<double>(free_bytes(dir))),
                 " free on the drive of ", dir,
                 "); free space there, point nvme_path at a larger drive, or keep more state in memory (max_in_cpu)");
}

std::string transfer_fully(int fd, bool write, void* buffer, size_t bytes, uint64_t offset) {
  auto* p = static_cast<char*>(buffer);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = write ? ::pwrite(fd, p + done, bytes - done, static_cast<off_t>(offset + done))
                            : ::pread(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n == 0 ? (write ? "no progress" : "end of file") : std::strerror(errno);
      return std::string(write ? "wrote " : "read ") + std::to_string(done) + " of " + std::to_string(bytes) +
             " bytes at offset " + std::to_string(offset) + ": " + why;
    }
    done += static_cast<size_t>(n);
  }
  return "";
}

void DirectFile::read_at(void* buffer, size_t bytes, uint64_t offset) const {
  const std::string e = transfer_fully(fd_, false, buffer, bytes, offset);
  if (!e.empty()) ZT_THROW_IO(path_, ": ", e);
}

void DirectFile::write_at(const void* buffer, size_t bytes, uint64_t offset) const {
  const std::string e = transfer_fully(fd_, true, const_cast<void*>(buffer), bytes, offset);
  if (!e.empty()) ZT_THROW_IO(path_, ": ", e);
}

uint64_t free_bytes(const std::string& dir) {
  if (const std::optional<uint64_t> pretended = simulated_drive_free()) return *pretended;
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

AlignedBuffer::AlignedBuffer(size_t bytes) : bytes_(round_up_to_direct(bytes)) {
  if (bytes_ == 0) return;
  data_ = allocate_host_pages(bytes_, kDirectAlignment);  // huge pages for large swap buffers
  if (data_ == nullptr) {
    ZT_THROW_INPUT("cannot allocate ", bytes_str(static_cast<double>(bytes_)),
                   " of aligned host memory for direct I/O; lower aio.block_size "
                   "or buffer_size, or free host memory");
  }
  std::memset(data_, 0, bytes_);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

}  // namespace zt::io
