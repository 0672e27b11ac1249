// Running the Python oracles (tools/*.py) from the parity tests.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace zt::testing {

// Runs a shell command; its exit code, or -1 when it could not run or did not exit normally.
inline int run_command(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// The whole content of a text file (an oracle's output or log).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Empty when python3 with torch is usable, else why not.
inline std::string torch_unavailable() {
  const std::string py = ZT_PYTHON3;
  if (py.empty() || py.find("NOTFOUND") != std::string::npos) return "python3 was not found at configure time";
  if (run_command("'" + py + "' -c 'import torch, numpy' > /dev/null 2>&1") != 0)
    return "'" + py + "' cannot import torch and numpy (install python3-torch)";
  return "";
}

}  // namespace zt::testing
