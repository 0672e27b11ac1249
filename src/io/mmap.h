// Read-only memory mappings of whole files (safetensors weights, token shards): the
// kernel pages data in on demand and shares it with the page cache, so opening a large
// file costs nothing and views into it are zero-copy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt::io {

// Prefault::Yes maps every page up front (MAP_POPULATE): one pass in the kernel instead of
// a page fault per 64 KB when the caller will read the whole file anyway (a model load);
// from the page cache that costs ~15 ms per GB, far less than the faults it saves.
enum class Prefault { No, Yes };

// A read-only memory mapping of a whole file (RAII, move-only).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path,
                      Prefault prefault = Prefault::No);  // BadInput if absent, Io if unreadable
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace zt::io
