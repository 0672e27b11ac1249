// safetensors files (https://github.com/huggingface/safetensors): reader and writer.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON (an object; may be padded
// with trailing spaces), then the data region. Each JSON entry except "__metadata__" is a
// tensor {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the
// start of the data region; "__metadata__" is an optional {string: string} map.
//
// The reader maps the file read-only and hands out zero-copy Tensor views into the mapping
// (writing through them faults). It validates the whole header when opened: header length
// <= 100 MB and inside the file, a JSON object without duplicate keys, known dtypes, shapes
// of non-negative integers, data_offsets whose byte length equals numel * dtype size, inside
// the data region, tiling it exactly (no overlap, no gap, no trailing bytes: what the
// reference reader requires). Every failure is a zt::Error of kind BadInput naming the
// file (and the tensor); nothing in a malformed file can make the reader crash or read out
// of bounds. Tensors of a dtype zerotrain has no DType for (F64, I8, BOOL, ...) are
// accepted in the header and only refused (kind Unsupported) when asked for.
//
// The writer emits what the PyPI `safetensors` package emits: header keys sorted, data of
// larger dtypes first (then by name) so every tensor is naturally aligned, header padded
// with spaces to a multiple of 8 bytes. Files are written atomically (a temporary file in
// the same directory, fsync, rename).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/mmap.h"
#include "io/output_file.h"  // write_file_atomic

namespace zt::io {

// Header limit, as in the reference implementation.
constexpr uint64_t kMaxSafetensorsHeader = 100ull * 1024 * 1024;

struct TensorInfo {
  std::string name;
  std::string dtype_name;    // as in the file: "F32", "BF16", ...
  bool supported = false;    // dtype is one of F32, BF16, F16, I32, I64, F8_E4M3, F8_E5M2
  DType dtype = DType::F32;  // meaningful when supported
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the data region
  uint64_t end = 0;
};

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path, Prefault prefault = Prefault::No);

  const std::string& path() const { return file_.path(); }
  // Tensor names in sorted order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  // Throws BadInput naming the file when the tensor is absent.
  const TensorInfo& info(const std::string& name) const;
  // Zero-copy view of the tensor's bytes (read-only memory; host). The view's data may be
  // unaligned for its dtype when the file's writer did not align it; see is_aligned().
  // Throws Unsupported when zerotrain has no DType for the tensor's dtype (F64, I8, ...).
  Tensor tensor(const std::string& name) const;
  // Raw bytes of a tensor, [data, data + end - begin).
  const uint8_t* bytes(const std::string& name) const;
  // A window of a 1-D or 2-D tensor: rows [row_begin, row_begin + rows) and (2-D) columns
  // [col_begin, col_begin + cols), converted into `dst` (host, a floating dtype; row i at
  // dst + i * dst_ld elements). Only the window's bytes are read: a row window is one
  // contiguous range, a column window one strided read per row (a tensor-parallel rank's
  // slice of a file, model/hf_tensor_parallel.h). 1-D: col_begin 0, cols 1. BadInput naming
  // the file and tensor when the window is outside the tensor; Unsupported for a dtype
  // zerotrain does not compute in.
  void read_window(const std::string& name, int64_t row_begin, int64_t rows, int64_t col_begin, int64_t cols, void* dst,
                   DType dst_dtype, int64_t dst_ld) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t header_size() const { return header_size_; }
  uint64_t data_offset() const { return 8 + header_size_; }

 private:
  MappedFile file_;
  uint64_t header_size_ = 0;
  std::map<std::string, TensorInfo> infos_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `fill` writes exactly numel(shape) * dtype_size(dtype) bytes into
// the scratch it is given (so large models are written one tensor at a time).
struct TensorSource {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::function<void(void* dst)> fill;
};

// Writes a safetensors file atomically. Names must be unique, non-empty and not
// "__metadata__" (BadInput otherwise). Errors writing are kind Io; no partial file is left.
void write_safetensors(const std::string& path, const std::vector<TensorSource>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Convenience: host tensors (any strides), written in their own dtype.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Safetensors dtype strings for our dtypes: "F32", "BF16", "F16", "I32", "I64", "F8_E4M3", "F8_E5M2".
const char* safetensors_dtype_name(DType dtype);

}  // namespace zt::io
