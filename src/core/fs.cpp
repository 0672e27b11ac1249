#include "core/fs.h"

#include <sys/stat.h>

namespace zt {

// stat(2) rather than std::filesystem: no exception and no error_code to thread through,
// and a failed stat is the "no" these predicates answer.
bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace zt
