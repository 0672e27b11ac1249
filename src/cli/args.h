// A small flag parser shared by the subcommands: --name value, --name=value, switches,
// positional arguments; HF's underscores are accepted for our dashes (--max_new_tokens is
// --max-new-tokens); unknown flags get a "did you mean" from the known ones.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/command.h"

namespace zt::cli {

class ArgParser {
 public:
  explicit ArgParser(std::string command) : command_(std::move(command)) {}
  void value(const std::string& flag, std::function<void(const std::string&)> set);
  void flag(const std::string& flag, std::function<void()> set);
  // Positional arguments are collected when allowed; otherwise they are errors.
  void positional(std::function<void(const std::string&)> add);
  // Throws BadInput for unknown flags, missing values.
  void parse(const Args& args) const;

 private:
  std::string command_;
  std::map<std::string, std::function<void(const std::string&)>> values_;
  std::map<std::string, std::function<void()>> flags_;
  std::function<void(const std::string&)> positional_;
};

int64_t parse_int(const std::string& flag, const std::string& text);
// --threads N of every command: N >= 1, capped to the machine's cores with a warning.
void apply_threads_flag(const std::string& text);
double parse_double(const std::string& flag, const std::string& text);
// The closest candidate within distance 3, or "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
// --help or -h before any "--" (what follows "--" is another command's).
bool wants_help(const Args& args);

}  // namespace zt::cli
