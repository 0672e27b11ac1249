#include "io/parquet_text.h"

#include "core/error.h"

#ifdef ZT_WITH_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>

#include <filesystem>
#endif

namespace zt::io {

#ifdef ZT_WITH_PARQUET

bool parquet_supported() { return true; }

namespace {
template <class T>
T value_or_throw(arrow::Result<T> r, const std::string& path, const char* what) {
  if (!r.ok()) ZT_THROW_INPUT(path, ": cannot ", what, " (Apache Arrow: ", r.status().ToString(), ")");
  return std::move(r).ValueOrDie();
}
}  // namespace

class ParquetTextColumn::Impl {
 public:
  Impl(const std::string& path, const std::string& column, const std::string& field_option)
      : path_(path), column_(column) {
    file_size_ = static_cast<int64_t>(std::filesystem::file_size(path));
    auto file = value_or_throw(arrow::io::ReadableFile::Open(path), path, "open the file");
    try {
      reader_ = value_or_throw(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), path,
                               "read it as Parquet");
    } catch (const parquet::ParquetException& e) {
      ZT_THROW_INPUT(path, ": not a readable Parquet file (", e.what(), ")");
    }
    const auto& fields = reader_->manifest().schema_fields;
    int found = -1;
    for (size_t i = 0; i < fields.size(); ++i) {
      const auto& f = fields[i].field;
      columns_.push_back(f->name() + " " + f->type()->ToString());
      if (found < 0 && f->name() == column) found = static_cast<int>(i);
    }
    std::string listed;
    for (const auto& c : columns_) listed += (listed.empty() ? "" : ", ") + c;
    if (found < 0)
      ZT_THROW_INPUT(path, ": no column '", column, "' (the columns: ", listed.empty() ? "none" : listed,
                     "); choose the text column with ", field_option);
    const auto& field = fields[static_cast<size_t>(found)];
    const arrow::Type::type id = field.field->type()->id();
    if (!field.is_leaf() || (id != arrow::Type::STRING && id != arrow::Type::LARGE_STRING))
      ZT_THROW_INPUT(path, ": column '", column, "' is ", field.field->type()->ToString(),
                     ", not a string column (the columns: ", listed, "); name a string column with ", field_option);
    leaf_ = field.column_index;
    groups_ = reader_->num_row_groups();
  }

  bool next(std::string_view& value) {
    for (;;) {
      while (chunk_ && row_ < chunk_->length()) {
        const int64_t r = row_++;
        if (chunk_->IsNull(r)) {
          ++nulls_;
          continue;
        }
        if (chunk_->type_id() == arrow::Type::LARGE_STRING)
          value = static_cast<const arrow::LargeStringArray&>(*chunk_).GetView(r);
        else
          value = static_cast<const arrow::StringArray&>(*chunk_).GetView(r);
        return true;
      }
      chunk_.reset();
      if (next_chunk_ < chunks_.size()) {
        chunk_ = chunks_[next_chunk_++];
        row_ = 0;
        continue;
      }
      if (group_ >= groups_) return false;
      // One row group at a time: memory stays at a row group's column, not the file's.
      std::shared_ptr<arrow::Table> t;
      try {
        t = value_or_throw(reader_->ReadRowGroup(group_, {leaf_}), path_, "read a row group");
      } catch (const parquet::ParquetException& e) {
        ZT_THROW_INPUT(path_, ": corrupt Parquet row group ", group_, " (", e.what(), ")");
      }
      ++group_;
      chunks_ = t->column(0)->chunks();
      next_chunk_ = 0;
    }
  }
  int64_t nulls() const { return nulls_; }
  int64_t bytes_done() const { return groups_ ? file_size_ * group_ / groups_ : file_size_; }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  std::string path_, column_;
  int64_t file_size_ = 0;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::vector<std::string> columns_;
  int leaf_ = 0, groups_ = 0, group_ = 0;
  arrow::ArrayVector chunks_;
  size_t next_chunk_ = 0;
  std::shared_ptr<arrow::Array> chunk_;
  int64_t row_ = 0, nulls_ = 0;
};

#else  // no Apache Arrow in this build

bool parquet_supported() { return false; }

class ParquetTextColumn::Impl {
 public:
  Impl(const std::string& path, const std::string& column, const std::string&) {
    ZT_THROW_INPUT(
        path,
        ": Parquet needs a build with Apache Arrow's C++ library (cmake -DZT_WITH_PARQUET=ON with libarrow-dev and "
        "libparquet-dev installed, or -DZT_ARROW_ROOT=$(python3 -c 'import pyarrow; print(pyarrow.__path__[0])') to "
        "use PyPI pyarrow's; `zerotrain report` says parquet yes); or convert it to JSON Lines: python3 -c \"import "
        "json, sys, pyarrow.parquet as pq; f = open(sys.argv[2], 'w'); [f.write(json.dumps({'",
        column, "': s}) + '\\n') for s in pq.read_table(sys.argv[1], columns=['", column,
        "']).column(0).to_pylist() if s is not None]\" ", path, " ", path, ".jsonl");
  }
  bool next(std::string_view&) { return false; }
  int64_t nulls() const { return 0; }
  int64_t bytes_done() const { return 0; }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  std::vector<std::string> columns_;
};

#endif

ParquetTextColumn::ParquetTextColumn(const std::string& path, const std::string& column,
                                     const std::string& field_option)
    : impl_(std::make_unique<Impl>(path, column, field_option)) {}
ParquetTextColumn::~ParquetTextColumn() = default;
bool ParquetTextColumn::next(std::string_view& value) { return impl_->next(value); }
int64_t ParquetTextColumn::nulls_skipped() const { return impl_->nulls(); }
int64_t ParquetTextColumn::bytes_done() const { return impl_->bytes_done(); }
const std::vector<std::string>& ParquetTextColumn::columns() const { return impl_->columns(); }

}  // namespace zt::io
