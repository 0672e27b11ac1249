#include "io/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "io/bounded_file.h"

namespace zt::io {
namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

MappedFile::MappedFile(const std::string& path, Prefault prefault) : path_(path) {
  // O_NONBLOCK: a FIFO given as a shard or data file must be refused below, not wait in
  // open() for a writer (mapping never reads through the flag).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) ZT_THROW_INPUT(path, ": no such file");
    ZT_THROW_IO(path, ": cannot open (", errno_text(), ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    ZT_THROW_IO(path, ": cannot stat (", err, ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    ZT_THROW_INPUT(path, ": not a regular file (it is ", file_kind_name(st.st_mode), ")");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | (prefault == Prefault::Yes ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) {
      const std::string err = errno_text();
      ::close(fd);
      ZT_THROW_IO(path, ": cannot map ", size_, " bytes (", err, ")");
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::reset() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace zt::io
