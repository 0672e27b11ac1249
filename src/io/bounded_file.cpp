#include "io/bounded_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace zt::io {
namespace {

std::string mib(uint64_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

}  // namespace

uint64_t check_bounded_file(const std::string& path, const std::string& what, uint64_t cap) {
  struct stat st {};
  // stat follows symlinks: a link to a regular file is fine, a link to /dev/zero is not.
  if (::stat(path.c_str(), &st) != 0)
    ZT_THROW_INPUT(path, ": cannot open the ", what, " (", std::strerror(errno), "); check the path");
  if (S_ISDIR(st.st_mode))
    ZT_THROW_INPUT(path, ": is a directory, but the ", what, " must be a file; name the file inside it");
  if (!S_ISREG(st.st_mode))
    ZT_THROW_INPUT(path, ": not a regular file (a device, FIFO or socket); the ", what,
                   " must be a regular file of at most ", mib(cap));
  if (static_cast<uint64_t>(st.st_size) > cap)
    ZT_THROW_INPUT(path, ": ", st.st_size, " bytes, more than the ", mib(cap), " a ", what,
                   " may have; is this the right file?");
  return static_cast<uint64_t>(st.st_size);
}

std::string read_bounded_file(const std::string& path, const std::string& what, uint64_t cap) {
  const uint64_t size = check_bounded_file(path, what, cap);
  std::ifstream in(path, std::ios::binary);
  if (!in) ZT_THROW_INPUT(path, ": cannot read the ", what, " (", std::strerror(errno), ")");
  // A file that grows after the stat is read only until it passes the cap.
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  char extra[4096];
  while (in.read(extra, sizeof extra) || in.gcount() > 0) {
    text.append(extra, static_cast<size_t>(in.gcount()));
    if (text.size() > cap)
      ZT_THROW_INPUT(path, ": grew past the ", mib(cap), " a ", what, " may have while being read");
  }
  return text;
}

}  // namespace zt::io
