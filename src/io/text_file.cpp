#include "io/bounded_file.h"
#include "io/byte_tokenizer.h"

namespace zt::io {

std::string read_text_file(const std::string& path) {
  // A regular file only (a FIFO or /dev/zero would hang or never end); its size bounds the read.
  return read_bounded_file(path, "text file", kNoCap);
}

}  // namespace zt::io
