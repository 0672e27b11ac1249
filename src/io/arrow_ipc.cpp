#include "io/arrow_ipc.h"

#include <cstring>

#include "core/error.h"
#include "io/flatbuffer_view.h"
#include "io/mmap.h"

namespace zt::io {

namespace {

// Message.fbs / Schema.fbs / File.fbs field indices and enum values (the vtable slot of
// each table field, in declaration order; a union takes two: its type, then its value).
namespace fb {
constexpr int kMessageVersion = 0, kMessageHeaderType = 1, kMessageHeader = 2, kMessageBodyLength = 3;
constexpr uint8_t kHeaderSchema = 1, kHeaderDictionaryBatch = 2, kHeaderRecordBatch = 3;
constexpr int kSchemaEndianness = 0, kSchemaFields = 1;
constexpr int kFieldName = 0, kFieldTypeType = 2, kFieldType = 3, kFieldDictionary = 4, kFieldChildren = 5;
constexpr int kBatchNodes = 1, kBatchBuffers = 2, kBatchCompression = 3, kBatchVariadicCounts = 4;
constexpr int kFooterSchema = 1, kFooterRecordBatches = 3;
constexpr int kUnionMode = 0;
constexpr int16_t kMetadataV5 = 4;  // MetadataVersion: V1 = 0 ... V5 = 4
constexpr size_t kFieldNodeBytes = 16, kBufferBytes = 16, kBlockBytes = 24;
// Type union members (Schema.fbs `union Type`).
enum Type : uint8_t {
  Null = 1, Int, FloatingPoint, Binary, Utf8, Bool, Decimal, Date, Time, Timestamp, Interval, List, Struct, Union,
  FixedSizeBinary, FixedSizeList, Map, Duration, LargeBinary, LargeUtf8, LargeList, RunEndEncoded, BinaryView,
  Utf8View, ListView, LargeListView
};
}  // namespace fb

const char* type_name(uint8_t t) {
  static const char* const kNames[] = {"none",        "null",         "int",           "float",
                                       "binary",      "string",       "bool",          "decimal",
                                       "date",        "time",         "timestamp",     "interval",
                                       "list",        "struct",       "union",         "fixed_size_binary",
                                       "fixed_size_list", "map",      "duration",      "large_binary",
                                       "large_string", "large_list",  "run_end_encoded", "binary_view",
                                       "string_view", "list_view",    "large_list_view"};
  return t < sizeof(kNames) / sizeof(kNames[0]) ? kNames[t] : "unknown";
}

// pyarrow's spelling of a field's type where it is short (int64, uint8, double), else the
// type's kind (list, struct, timestamp).
std::string full_type_name(const FlatTable& field) {
  const uint8_t type = field.scalar<uint8_t>(fb::kFieldTypeType, 0);
  if (type == fb::Int && field.has(fb::kFieldType)) {
    const FlatTable t = field.table(fb::kFieldType);
    return std::string(t.scalar<uint8_t>(1, 0) ? "int" : "uint") + std::to_string(t.scalar<int32_t>(0, 0));
  }
  if (type == fb::FloatingPoint && field.has(fb::kFieldType)) {
    const int16_t precision = field.table(fb::kFieldType).scalar<int16_t>(0, 0);
    return precision == 0 ? "halffloat" : precision == 1 ? "float" : "double";
  }
  return type_name(type);
}

// Nodes and buffers one field takes in a record batch (its children included).
struct Span {
  size_t nodes = 0;
  size_t buffers = 0;  // not counting the variadic buffers of view types
  size_t views = 0;    // binary_view / string_view fields: each adds variadicBufferCounts[k]
};

void add_field(const FlatTable& field, int16_t version, Span& s, int depth, const std::string& path) {
  if (depth > 64) ZT_THROW_INPUT(path, ": corrupt Arrow schema (fields nested more than 64 deep)");
  ++s.nodes;
  // A dictionary-encoded field holds its indices (validity + integers); the values come
  // in DictionaryBatch messages.
  if (field.has(fb::kFieldDictionary)) {
    s.buffers += 2;
    return;
  }
  const uint8_t type = field.scalar<uint8_t>(fb::kFieldTypeType, 0);
  bool children = false;
  switch (type) {
    case fb::Null:
    case fb::RunEndEncoded:
      children = type == fb::RunEndEncoded;
      break;
    case fb::Int: case fb::FloatingPoint: case fb::Bool: case fb::Decimal: case fb::Date: case fb::Time:
    case fb::Timestamp: case fb::Interval: case fb::FixedSizeBinary: case fb::Duration:
      s.buffers += 2;  // validity, values
      break;
    case fb::Binary: case fb::Utf8: case fb::LargeBinary: case fb::LargeUtf8:
      s.buffers += 3;  // validity, offsets, bytes
      break;
    case fb::BinaryView: case fb::Utf8View:
      s.buffers += 2;  // validity, views; then its variadic data buffers
      ++s.views;
      break;
    case fb::List: case fb::LargeList: case fb::Map:
      s.buffers += 2;  // validity, offsets
      children = true;
      break;
    case fb::ListView: case fb::LargeListView:
      s.buffers += 3;  // validity, offsets, sizes
      children = true;
      break;
    case fb::Struct: case fb::FixedSizeList:
      s.buffers += 1;  // validity
      children = true;
      break;
    case fb::Union: {
      const bool dense = field.table(fb::kFieldType).scalar<int16_t>(fb::kUnionMode, 0) == 1;
      s.buffers += (dense ? 2 : 1) + (version < fb::kMetadataV5 ? 1 : 0);  // type ids (+ offsets; + validity before V5)
      children = true;
      break;
    }
    default:
      ZT_THROW_INPUT(path, ": an Arrow column of an unknown type (", static_cast<int>(type),
                     "); this reader knows Arrow's types up to format 1.4");
  }
  if (!children) return;
  const FlatVector kids = field.vector(fb::kFieldChildren, 4);
  for (uint32_t i = 0; i < kids.count; ++i) add_field(FlatTable::table_at(kids, i), version, s, depth + 1, path);
}

}  // namespace

class ArrowTextColumn::Impl {
 public:
  Impl(const std::string& path, const std::string& column, const std::string& field_option)
      : file_(path), path_(path), column_(column), field_option_(field_option) {
    const uint8_t* d = file_.data();
    const size_t n = file_.size();
    if (n >= 8 && std::memcmp(d, "ARROW1", 6) == 0) {
      open_file_format();
    } else {
      is_file_ = false;
      const Message m = read_message(0);
      if (!m.valid || m.header_type != fb::kHeaderSchema)
        ZT_THROW_INPUT(path_, ": not an Arrow IPC stream (its first message is not a schema)");
      const FlatBuffer meta(d + m.meta, m.meta_len, path_);
      version_ = FlatTable::root(meta).scalar<int16_t>(fb::kMessageVersion, 0);
      read_schema(FlatTable::root(meta).table(fb::kMessageHeader));
      next_message_ = m.body + m.body_len;
    }
  }

  bool next(std::string_view& value) {
    for (;;) {
      while (row_ < rows_) {
        const int64_t r = row_++;
        if (validity_ && !((validity_[r >> 3] >> (r & 7)) & 1)) {
          ++nulls_;
          continue;
        }
        const int64_t begin = offset(r), end = offset(r + 1);
        if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_len_)
          ZT_THROW_INPUT(path_, ": corrupt Arrow data (string offsets ", begin, "..", end, " of row ", r,
                         " lie outside its ", data_len_, " bytes)");
        value = std::string_view(reinterpret_cast<const char*>(data_) + begin, static_cast<size_t>(end - begin));
        return true;
      }
      if (!next_batch()) return false;
    }
  }

  int64_t nulls() const { return nulls_; }
  int64_t bytes_done() const { return static_cast<int64_t>(done_ ? file_.size() : bytes_done_); }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  // One encapsulated message: where its FlatBuffers metadata and its body lie.
  struct Message {
    bool valid = false;  // false: the end-of-stream marker (or the end of the file)
    size_t meta = 0, meta_len = 0;
    size_t body = 0;
    uint64_t body_len = 0;
    uint8_t header_type = 0;
  };

  Message read_message(size_t pos) const {
    Message m;
    const size_t n = file_.size();
    if (pos + 4 > n) return m;  // a stream may end without the marker
    const FlatBuffer whole(file_.data(), n, path_);
    size_t at = pos;
    if (whole.read<uint32_t>(at) == 0xFFFFFFFFu) at += 4;  // the continuation marker (format >= 0.15)
    const int32_t len = whole.read<int32_t>(at);
    if (len == 0) return m;
    if (len < 0) ZT_THROW_INPUT(path_, ": corrupt Arrow IPC (a message of negative length at byte ", pos, ")");
    m.meta = at + 4;
    m.meta_len = static_cast<size_t>(len);
    whole.check(m.meta, m.meta_len);
    const FlatBuffer meta(file_.data() + m.meta, m.meta_len, path_);
    const FlatTable msg = FlatTable::root(meta);
    m.header_type = msg.scalar<uint8_t>(fb::kMessageHeaderType, 0);
    const int64_t body_len = msg.scalar<int64_t>(fb::kMessageBodyLength, 0);
    m.body = m.meta + m.meta_len;
    if (body_len < 0 || static_cast<uint64_t>(body_len) > n - m.body)
      ZT_THROW_INPUT(path_, ": truncated Arrow IPC (a message body of ", body_len, " bytes at byte ", m.body,
                     " runs past the file's end, ", n, " bytes); write the file again");
    m.body_len = static_cast<uint64_t>(body_len);
    m.valid = true;
    return m;
  }

  void open_file_format() {
    is_file_ = true;
    const size_t n = file_.size();
    const FlatBuffer whole(file_.data(), n, path_);
    if (n < 18 || std::memcmp(file_.data() + n - 6, "ARROW1", 6) != 0)
      ZT_THROW_INPUT(path_, ": truncated Arrow IPC file (no \"ARROW1\" at its end); write it again");
    const int32_t footer_len = whole.read<int32_t>(n - 10);
    if (footer_len <= 0 || static_cast<size_t>(footer_len) > n - 18)
      ZT_THROW_INPUT(path_, ": corrupt Arrow IPC file (footer length ", footer_len, ")");
    footer_start_ = n - 10 - static_cast<size_t>(footer_len);
    footer_ = std::make_unique<FlatBuffer>(file_.data() + footer_start_, static_cast<size_t>(footer_len), path_);
    const FlatTable footer = FlatTable::root(*footer_);
    version_ = footer.scalar<int16_t>(0, 0);
    read_schema(footer.table(fb::kFooterSchema));
    blocks_ = footer.vector(fb::kFooterRecordBatches, fb::kBlockBytes);
  }

  void read_schema(const FlatTable& schema) {
    if (schema.scalar<int16_t>(fb::kSchemaEndianness, 0) != 0)
      ZT_THROW_INPUT(path_, ": a big-endian Arrow file; rewrite it on a little-endian machine (pyarrow does)");
    const FlatVector fields = schema.vector(fb::kSchemaFields, 4);
    Span before;
    bool found = false;
    uint8_t found_type = 0;
    std::string found_name;
    bool dictionary = false;
    for (uint32_t i = 0; i < fields.count; ++i) {
      const FlatTable f = FlatTable::table_at(fields, i);
      const std::string name = f.string(fb::kFieldName);
      const uint8_t type = f.scalar<uint8_t>(fb::kFieldTypeType, 0);
      columns_.push_back(name + " " + (f.has(fb::kFieldDictionary) ? "dictionary<" : "") + full_type_name(f) +
                         (f.has(fb::kFieldDictionary) ? ">" : ""));
      if (!found && name == column_) {
        found = true;
        found_type = type;
        found_name = full_type_name(f);
        dictionary = f.has(fb::kFieldDictionary);
        node_ = before.nodes;
        buffer_ = before.buffers;
        views_before_ = before.views;
      }
      add_field(f, version_, before, 0, path_);
    }
    std::string listed;
    for (const auto& c : columns_) listed += (listed.empty() ? "" : ", ") + c;
    if (!found)
      ZT_THROW_INPUT(path_, ": no column '", column_, "' (the columns: ", listed.empty() ? "none" : listed,
                     "); choose the text column with ", field_option_);
    if (dictionary || (found_type != fb::Utf8 && found_type != fb::LargeUtf8))
      ZT_THROW_INPUT(path_, ": column '", column_, "' is ", dictionary ? "dictionary-encoded " : "", found_name,
                     ", not a string (string / large_string) column (the columns: ", listed,
                     "); name a string column with ", field_option_, ", or cast it to string in pyarrow "
                     "(table.cast) or datasets (dataset.cast_column)");
    large_ = found_type == fb::LargeUtf8;
  }

  // Sets up the next record batch's column; false at the end.
  bool next_batch() {
    for (;;) {
      Message m;
      if (is_file_) {
        if (next_block_ >= blocks_.count) break;
        const size_t at = blocks_.start + fb::kBlockBytes * next_block_++;
        const int64_t offset = footer_->read<int64_t>(at);
        if (offset < 0 || static_cast<uint64_t>(offset) >= footer_start_)
          ZT_THROW_INPUT(path_, ": corrupt Arrow IPC file (a record batch at byte ", offset, ")");
        m = read_message(static_cast<size_t>(offset));
        if (!m.valid || m.header_type != fb::kHeaderRecordBatch)
          ZT_THROW_INPUT(path_, ": corrupt Arrow IPC file (its footer names a record batch at byte ", offset,
                         " that is not one)");
      } else {
        m = read_message(next_message_);
        if (!m.valid) break;
        next_message_ = m.body + m.body_len;
        if (m.header_type == fb::kHeaderDictionaryBatch) continue;  // another column's dictionary
        if (m.header_type != fb::kHeaderRecordBatch)
          ZT_THROW_INPUT(path_, ": unexpected Arrow IPC message (type ", static_cast<int>(m.header_type), ") at byte ",
                         m.meta, "; only record and dictionary batches may follow the schema");
      }
      bytes_done_ = m.body + m.body_len;
      if (load_batch(m)) return true;
    }
    done_ = true;
    return false;
  }

  bool load_batch(const Message& m) {
    const FlatBuffer meta(file_.data() + m.meta, m.meta_len, path_);
    const FlatTable batch = FlatTable::root(meta).table(fb::kMessageHeader);
    if (batch.has(fb::kBatchCompression)) {
      const int8_t codec = batch.table(fb::kBatchCompression).scalar<int8_t>(0, 0);
      const char* open = is_file_ ? "open_file" : "open_stream";
      const char* make = is_file_ ? "new_file" : "new_stream";
      ZT_THROW_INPUT(path_, ": its record batches are compressed (", codec == 1 ? "zstd" : "lz4",
                     "); zerotrain reads uncompressed Arrow IPC. Rewrite it uncompressed: python3 -c \"import "
                     "pyarrow as pa, sys; t = pa.ipc.",
                     open, "(sys.argv[1]).read_all(); w = pa.ipc.", make,
                     "(sys.argv[2], t.schema); w.write_table(t); w.close()\" IN.arrow OUT.arrow (or convert it to "
                     "JSON Lines)");
    }
    const FlatVector nodes = batch.vector(fb::kBatchNodes, fb::kFieldNodeBytes);
    const FlatVector buffers = batch.vector(fb::kBatchBuffers, fb::kBufferBytes);
    const FlatVector variadic = batch.vector(fb::kBatchVariadicCounts, 8);
    size_t b = buffer_;
    if (views_before_ > variadic.count)
      ZT_THROW_INPUT(path_, ": corrupt Arrow record batch (", variadic.count, " variadic buffer counts for ",
                     views_before_, " view columns)");
    for (size_t v = 0; v < views_before_; ++v) {
      const int64_t k = meta.read<int64_t>(variadic.start + 8 * v);
      if (k < 0 || k > (int64_t{1} << 32)) ZT_THROW_INPUT(path_, ": corrupt Arrow record batch (variadic count ", k, ")");
      b += static_cast<size_t>(k);
    }
    if (node_ >= nodes.count || b + 3 > buffers.count)
      ZT_THROW_INPUT(path_, ": corrupt Arrow record batch (", nodes.count, " field nodes and ", buffers.count,
                     " buffers do not reach column '", column_, "')");
    const int64_t rows = meta.read<int64_t>(nodes.start + fb::kFieldNodeBytes * node_);
    const int64_t null_count = meta.read<int64_t>(nodes.start + fb::kFieldNodeBytes * node_ + 8);
    const size_t width = large_ ? 8 : 4;
    const auto buffer = [&](size_t i, uint64_t need, const char* what) {
      const size_t at = buffers.start + fb::kBufferBytes * (b + i);
      const int64_t off = meta.read<int64_t>(at), len = meta.read<int64_t>(at + 8);
      if (off < 0 || len < 0 || static_cast<uint64_t>(off) > m.body_len ||
          static_cast<uint64_t>(len) > m.body_len - static_cast<uint64_t>(off) || static_cast<uint64_t>(len) < need)
        ZT_THROW_INPUT(path_, ": corrupt Arrow record batch (column '", column_, "': its ", what, " buffer, ", len,
                       " bytes at ", off, ", does not fit the body of ", m.body_len, " bytes or holds under ", need,
                       ")");
      return std::make_pair(file_.data() + m.body + off, static_cast<uint64_t>(len));
    };
    if (rows < 0 || null_count < 0 || null_count > rows)
      ZT_THROW_INPUT(path_, ": corrupt Arrow record batch (", rows, " rows, ", null_count, " nulls)");
    const uint64_t n = static_cast<uint64_t>(rows);
    if (n > file_.size()) ZT_THROW_INPUT(path_, ": corrupt Arrow record batch (", rows, " rows)");
    const auto validity = buffer(0, null_count > 0 ? (n + 7) / 8 : 0, "validity");
    const auto offsets = buffer(1, n > 0 ? (n + 1) * width : 0, "offsets");
    const auto data = buffer(2, 0, "data");
    validity_ = null_count > 0 ? validity.first : nullptr;
    offsets_ = offsets.first;
    data_ = data.first;
    data_len_ = data.second;
    rows_ = rows;
    row_ = 0;
    return true;
  }

  int64_t offset(int64_t i) const {
    if (large_) {
      int64_t v;
      std::memcpy(&v, offsets_ + 8 * i, 8);
      return v;
    }
    int32_t v;
    std::memcpy(&v, offsets_ + 4 * i, 4);
    return v;
  }

  MappedFile file_;
  std::string path_, column_, field_option_;
  std::vector<std::string> columns_;
  int16_t version_ = fb::kMetadataV5;
  bool is_file_ = false;
  // The column's place in every record batch.
  size_t node_ = 0, buffer_ = 0, views_before_ = 0;
  bool large_ = false;
  // Where the next record batch is.
  size_t next_message_ = 0;                  // stream
  std::unique_ptr<FlatBuffer> footer_;       // file
  size_t footer_start_ = 0;
  FlatVector blocks_;
  uint32_t next_block_ = 0;
  // The current record batch's column.
  const uint8_t* validity_ = nullptr;
  const uint8_t* offsets_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t data_len_ = 0;
  int64_t rows_ = 0, row_ = 0, nulls_ = 0;
  size_t bytes_done_ = 0;
  bool done_ = false;
};

ArrowTextColumn::ArrowTextColumn(const std::string& path, const std::string& column, const std::string& field_option)
    : impl_(std::make_unique<Impl>(path, column, field_option)) {}
ArrowTextColumn::~ArrowTextColumn() = default;
bool ArrowTextColumn::next(std::string_view& value) { return impl_->next(value); }
int64_t ArrowTextColumn::nulls_skipped() const { return impl_->nulls(); }
int64_t ArrowTextColumn::bytes_done() const { return impl_->bytes_done(); }
const std::vector<std::string>& ArrowTextColumn::columns() const { return impl_->columns(); }

}  // namespace zt::io
