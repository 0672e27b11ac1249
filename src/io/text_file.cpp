#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/byte_tokenizer.h"

namespace zt::io {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ZT_THROW_INPUT("cannot read '", path, "': no such file or not readable");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace zt::io
