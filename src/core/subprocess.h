// Running another program: always from an argument vector, never through a shell, so a
// path or name that holds quotes, `;` or `$(...)` is one argument and nothing else (a
// command line pasted together for a shell runs whatever a crafted folder name says). The one place
// zerotrain starts a helper program (rsvg-convert for `plot`, dd for `bench io`).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace zt {

// How a program ended.
struct ProgramResult {
  enum class Ended { Exited, Signalled, NotStarted };
  Ended ended = Ended::NotStarted;
  int code = 0;            // the exit code, the signal number, or errno when not started
  std::string output;      // stdout and stderr together, at most the cap given
  bool truncated = false;  // more output came than the cap; it was read and dropped
  bool ok() const { return ended == Ended::Exited && code == 0; }
  // "exit code 1", "killed by signal 9", "could not start (No such file or directory)".
  std::string describe() const;
};

// Runs argv[0] (searched in PATH when it has no '/') with the arguments argv[1..], stdin
// from /dev/null, stdout and stderr captured through a pipe (the first `output_cap` bytes
// kept), and waits for it. Never throws for the program's own failure: see the result.
ProgramResult run_program(const std::vector<std::string>& argv, size_t output_cap = 64 * 1024);

// The executable `name` in PATH (or `name` itself when it holds a '/'); empty when there is
// none. What `command -v` answers, without a shell.
std::string find_program(const std::string& name);

}  // namespace zt
