// One string column of a Parquet file, read through Apache Arrow's C++ library
// (libparquet) when the build has it (cmake -DZT_WITH_PARQUET=ON: find_package(Parquet),
// or ZT_ARROW_ROOT naming an Arrow install or PyPI pyarrow's package folder; `zerotrain
// report` says `parquet yes`). Parquet's pages are compressed and encoded (snappy, zstd,
// dictionary, RLE), so unlike Arrow IPC (io/arrow_ipc.h) it gets no in-house reader.
//
// Without the library, opening a Parquet file is BadInput naming the file, the build
// option and a one-line pyarrow command converting it to JSON Lines.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt::io {

// Whether this build reads Parquet (linked against libparquet).
bool parquet_supported();

// The interface of ArrowTextColumn (io/arrow_ipc.h), over a Parquet file's row groups.
class ParquetTextColumn {
 public:
  // BadInput naming the file: no Parquet support in this build, a corrupt file, or no
  // string column `column` (the message lists the columns).
  ParquetTextColumn(const std::string& path, const std::string& column, const std::string& field_option = "--field NAME");
  ~ParquetTextColumn();
  ParquetTextColumn(const ParquetTextColumn&) = delete;
  ParquetTextColumn& operator=(const ParquetTextColumn&) = delete;

  bool next(std::string_view& value);  // valid until the next call
  int64_t nulls_skipped() const;
  int64_t bytes_done() const;  // the file's bytes in proportion to the row groups read
  const std::vector<std::string>& columns() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::io
