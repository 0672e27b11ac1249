#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_driver.h"

namespace zt::fuzz {

namespace {
// Scratch files are removed when the process ends normally (a crash leaves them for study).
struct ScratchFiles {
  std::vector<std::string> paths;
  ~ScratchFiles() {
    for (const auto& p : paths) std::remove(p.c_str());
  }
};
ScratchFiles& scratch_files() {
  static ScratchFiles files;
  return files;
}
}  // namespace

std::string scratch_path(const std::string& suffix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string p = std::string(tmp && *tmp ? tmp : "/tmp") + "/zt_fuzz_" + std::to_string(::getpid()) + suffix;
  scratch_files().paths.push_back(p);
  return p;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();  // the fuzzer's own scratch file: nothing to report but a broken setup
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace zt::fuzz
