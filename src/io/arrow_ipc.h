// One string column of an Arrow IPC file, read without the Arrow library: the stream
// format (what `datasets`' save_to_disk writes as data-0000N-of-0000M.arrow, and
// pyarrow.ipc.new_stream) and the file format ("ARROW1", pyarrow.ipc.new_file, Feather v2).
//
// Layout (arrow.apache.org/docs/format/Columnar.html, "Serialization and IPC"; metadata in
// format/Schema.fbs, Message.fbs, File.fbs): a stream is a sequence of encapsulated messages
// (0xFFFFFFFF, an i32 metadata length, a FlatBuffers Message, then the body), a Schema
// first, then RecordBatch (and DictionaryBatch) messages, ended by 0xFFFFFFFF 0x00000000.
// A file is "ARROW1", padding, the stream, a Footer (the schema and the record batches'
// blocks), the footer's length and "ARROW1". A record batch lists one FieldNode per field
// (depth first: length, null count) and its buffers in the same order (for utf8:
// validity bitmap, i32 offsets, bytes; large_utf8: i64 offsets).
//
// Read: uncompressed record batches, little-endian, the column being utf8 or large_utf8
// (any other columns are skipped over, whatever their types). Nulls are skipped and
// counted. Compressed bodies, a dictionary-encoded or non-string column, or a big-endian
// file are BadInput naming the file and the fix. Every offset is checked against the file,
// so a corrupt or truncated file is an error, never a read out of bounds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt::io {

class ArrowTextColumn {
 public:
  // BadInput naming the file when it is not Arrow IPC, is corrupt, or has no string column
  // `column` (the message lists the columns it has and says to set `field_option`).
  ArrowTextColumn(const std::string& path, const std::string& column, const std::string& field_option = "--field NAME");
  ~ArrowTextColumn();
  ArrowTextColumn(const ArrowTextColumn&) = delete;
  ArrowTextColumn& operator=(const ArrowTextColumn&) = delete;

  // The next non-null value (a view into the mapped file, valid while this object lives);
  // false after the last one.
  bool next(std::string_view& value);
  int64_t nulls_skipped() const;
  // File bytes read so far (up to the end of the current record batch; the file's size at
  // the end), for progress.
  int64_t bytes_done() const;
  // "name type" of every top-level column, in schema order.
  const std::vector<std::string>& columns() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::io
