#include "cli/args.h"
#include "core/strings.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/error.h"
#include "core/parallel.h"

namespace zt::cli {

void ArgParser::value(const std::string& f, std::function<void(const std::string&)> set) {
  values_[f] = std::move(set);
}
void ArgParser::flag(const std::string& f, std::function<void()> set) { flags_[f] = std::move(set); }
void ArgParser::positional(std::function<void(const std::string&)> add) { positional_ = std::move(add); }

void ArgParser::parse(const Args& args) const {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name.rfind("--", 0) != 0 || name == "--") {
      if (name == "--") {
        for (++i; i < args.size(); ++i)
          if (positional_) positional_(args[i]);
        return;
      }
      if (!positional_) ZT_THROW_INPUT("unexpected argument '", name, "' for 'zerotrain ", command_, "'");
      positional_(name);
      continue;
    }
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    // HF's spelling (--max_new_tokens) for ours (--max-new-tokens): the same option.
    if (flags_.count(name) == 0 && values_.count(name) == 0) {
      std::string dashed = name;
      std::replace(dashed.begin() + 2, dashed.end(), '_', '-');
      if (flags_.count(dashed) != 0 || values_.count(dashed) != 0) name = dashed;
    }
    if (auto s = flags_.find(name); s != flags_.end() && !inline_value) {
      s->second();
      continue;
    }
    if (auto v = values_.find(name); v != values_.end()) {
      if (!inline_value) {
        if (i + 1 >= args.size()) ZT_THROW_INPUT(name, " needs a value");
        value = args[++i];
      }
      v->second(value);
      continue;
    }
    std::vector<std::string> known;
    for (const auto& kv : values_) known.push_back(kv.first);
    for (const auto& kv : flags_) known.push_back(kv.first);
    const std::string best = closest(name, known);
    ZT_THROW_INPUT("unknown option '", name, "' for 'zerotrain ", command_, "'",
                   best.empty() ? std::string() : " (did you mean " + best + "?)", "; see 'zerotrain ", command_,
                   " --help'");
  }
}

int64_t parse_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) ZT_THROW_INPUT(flag, " expects an integer, got '", v, "'");
  if (errno == ERANGE) ZT_THROW_INPUT(flag, " ", v, " is out of range");
  return x;
}

void apply_threads_flag(const std::string& v) {
  const int64_t n = parse_int("--threads", v);
  if (n < 1) ZT_THROW_INPUT("--threads ", v, ": give at least 1 (the default is all cores)");
  set_num_threads(n, "--threads");  // capped to the cores, with a warning
}

double parse_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) ZT_THROW_INPUT(flag, " expects a number, got '", v, "'");
  return x;
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  return closest_match(word, candidates, 3);
}

bool wants_help(const Args& args) {
  // Arguments after "--" belong to another command (zerotrain launch -- zerotrain train --help).
  const auto end = std::find(args.begin(), args.end(), "--");
  return std::any_of(args.begin(), end, [](const std::string& a) { return a == "--help" || a == "-h"; });
}

}  // namespace zt::cli
