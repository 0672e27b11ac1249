// Read-only, bounds-checked access to FlatBuffers tables: just what reading Arrow IPC
// metadata needs (Message, Schema, RecordBatch, Footer), without the flatc-generated code
// or the flatbuffers library.
//
// The wire rules (flatbuffers.dev, "Internals"): a buffer starts with a u32 offset to the
// root table; a table starts with an i32 whose subtraction from the table's position gives
// its vtable; a vtable is u16 vtable bytes, u16 table bytes, then one u16 per field (the
// field's offset in the table, 0 when absent). An offset field (table, vector, string) is a
// u32 relative to where it is stored; a vector is a u32 count followed by its elements;
// structs are stored inline. Every read is checked against the buffer, so a corrupt file
// is an error naming it, never a read out of bounds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"

namespace zt::io {

class FlatBuffer {
 public:
  // `what` names the buffer in errors (the file path and the message).
  FlatBuffer(const uint8_t* data, size_t size, std::string what) : data_(data), size_(size), what_(std::move(what)) {}

  template <class T>
  T read(size_t pos) const {
    check(pos, sizeof(T));
    T v;
    std::memcpy(&v, data_ + pos, sizeof(T));
    return v;
  }
  void check(size_t pos, size_t n) const {
    if (pos > size_ || n > size_ - pos) ZT_THROW_INPUT(what_, ": corrupt metadata (a reference past its end)");
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& what() const { return what_; }

 private:
  const uint8_t* data_;
  size_t size_;
  std::string what_;
};

// A vector of structs (elem_size bytes each) or of offsets to tables.
struct FlatVector {
  const FlatBuffer* buf = nullptr;
  size_t start = 0;  // the first element
  uint32_t count = 0;
};

class FlatTable {
 public:
  FlatTable(const FlatBuffer& buf, size_t pos) : buf_(&buf), pos_(pos) {
    const int32_t back = buf.read<int32_t>(pos);
    const int64_t vt = static_cast<int64_t>(pos) - back;
    if (vt < 0) ZT_THROW_INPUT(buf.what(), ": corrupt metadata (a vtable before the buffer)");
    vtable_ = static_cast<size_t>(vt);
    vtable_size_ = buf.read<uint16_t>(vtable_);
    if (vtable_size_ < 4 || vtable_size_ % 2) ZT_THROW_INPUT(buf.what(), ": corrupt metadata (bad vtable)");
    buf.check(vtable_, vtable_size_);
  }
  // The root table of a buffer.
  static FlatTable root(const FlatBuffer& buf) { return FlatTable(buf, buf.read<uint32_t>(0)); }

  bool has(int field) const { return field_offset(field) != 0; }

  template <class T>
  T scalar(int field, T fallback) const {
    const uint16_t off = field_offset(field);
    return off ? buf_->read<T>(pos_ + off) : fallback;
  }
  FlatTable table(int field) const { return FlatTable(*buf_, target(field)); }
  std::string string(int field) const {
    if (!has(field)) return "";
    const size_t at = target(field);
    const uint32_t n = buf_->read<uint32_t>(at);
    buf_->check(at + 4, n);
    return std::string(reinterpret_cast<const char*>(buf_->data() + at + 4), n);
  }
  // elem_size: a struct's size, or 4 for a vector of tables (see table_at).
  FlatVector vector(int field, size_t elem_size) const {
    if (!has(field)) return {buf_, 0, 0};
    const size_t at = target(field);
    const uint32_t n = buf_->read<uint32_t>(at);
    buf_->check(at + 4, static_cast<size_t>(n) * elem_size);
    return {buf_, at + 4, n};
  }
  static FlatTable table_at(const FlatVector& v, uint32_t i) {
    const size_t at = v.start + 4 * static_cast<size_t>(i);
    return FlatTable(*v.buf, at + v.buf->read<uint32_t>(at));
  }

 private:
  uint16_t field_offset(int field) const {
    const size_t slot = 4 + 2 * static_cast<size_t>(field);
    return slot + 2 <= vtable_size_ ? buf_->read<uint16_t>(vtable_ + slot) : uint16_t{0};
  }
  size_t target(int field) const {
    const uint16_t off = field_offset(field);
    if (!off) ZT_THROW_INPUT(buf_->what(), ": corrupt metadata (a required field is missing)");
    const size_t at = pos_ + off;
    return at + buf_->read<uint32_t>(at);
  }

  const FlatBuffer* buf_;
  size_t pos_;
  size_t vtable_ = 0;
  uint16_t vtable_size_ = 0;
};

}  // namespace zt::io
