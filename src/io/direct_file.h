// Files for NVMe offload's swap traffic: opened with O_DIRECT (no page cache: the data
// goes between the drive and our aligned buffers by DMA, and a 100 GB swap does not evict
// the rest of the machine's cache), falling back to buffered I/O on filesystems that
// refuse O_DIRECT (tmpfs, some overlay and network filesystems) with the reason kept for
// one warning. With O_DIRECT every transfer's buffer address, offset and length must be
// multiples of kDirectAlignment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt::io {

// The alignment O_DIRECT needs on every drive we meet (4 KiB logical blocks; 512-byte
// drives accept it too).
constexpr size_t kDirectAlignment = 4096;

inline size_t round_up_to_direct(size_t bytes) {
  return (bytes + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
}

enum class FileAccess { Read, Write, ReadWrite };  // Write and ReadWrite create the file
enum class IoMode { Direct, Buffered };            // what the open obtained

class DirectFile {
 public:
  DirectFile() = default;
  // Opens `path` with O_DIRECT, or buffered when the filesystem refuses O_DIRECT
  // (mode() says which; fallback_reason() why). BadInput naming the path and the fix when
  // the file cannot be opened or created (permissions, missing folder).
  DirectFile(const std::string& path, FileAccess access);
  ~DirectFile();
  DirectFile(DirectFile&& other) noexcept;
  DirectFile& operator=(DirectFile&& other) noexcept;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;

  int fd() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  IoMode mode() const { return mode_; }
  const std::string& path() const { return path_; }
  const std::string& fallback_reason() const { return fallback_reason_; }

  // Reserves `bytes` on the drive (fallocate; ftruncate where that is unsupported), so a
  // full disk fails here, before training, not in the middle of a step. BadInput naming
  // the path, the bytes and the free space when the drive cannot hold them.
  void reserve(uint64_t bytes);
  // Synchronous full-length transfers (retrying short ones and EINTR); an Io error
  // naming the file and offset on failure or end of file.
  void read_at(void* buffer, size_t bytes, uint64_t offset) const;
  void write_at(const void* buffer, size_t bytes, uint64_t offset) const;

 private:
  void close() noexcept;
  int fd_ = -1;
  IoMode mode_ = IoMode::Direct;
  std::string path_, fallback_reason_;
};

// One transfer of `bytes` at `offset`, retrying short transfers and EINTR; returns "" or
// what failed ("read 4096 of 8192 bytes at offset 0: end of file"). The building block of
// the synchronous calls above and of the thread-pool engine (io/async_io.h).
std::string transfer_fully(int fd, bool write, void* buffer, size_t bytes, uint64_t offset);

// Bytes free for an unprivileged writer on the filesystem holding `dir`.
uint64_t free_bytes(const std::string& dir);

// A page-aligned (kDirectAlignment) host buffer for direct transfers, zero-filled.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);  // rounded up to kDirectAlignment
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace zt::io
