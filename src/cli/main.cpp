// zerotrain command line: thin; finds the subcommand and reports errors.
// Exit codes: 0 ok, 1 runtime failure, 2 usage / config / bad input.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/parallel.h"
#include "comm/abort.h"
#include "comm/env.h"

namespace zt::cli {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace

Registrar::Registrar(Command command) { registry().push_back(std::move(command)); }
const std::vector<Command>& commands() { return registry(); }

}  // namespace zt::cli

namespace {

constexpr const char* kVersion = "0.1.0";

// One rank of a multi-rank job that fails must end the whole job: the other ranks wait in
// collectives this one will never join, and would hang until their timeouts.
void end_job_if_one_of_many_ranks(const std::string& message, int exit_code) {
  int world_size = 1;
  try {
    world_size = zt::comm::read_launch_env().world_size;
  } catch (...) {
    // Malformed launcher variables: not a job we can tell the size of; report as one process.
  }
  if (world_size > 1) zt::comm::abort_job(message, exit_code);
}

void print_usage() {
  std::printf("zerotrain %s — train and fine-tune LLMs with ZeRO sharding\n\n", kVersion);
  std::printf("usage: zerotrain <command> [options]     (zerotrain <command> --help for its options)\n\ncommands:\n");
  for (const auto& c : zt::cli::commands()) std::printf("  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("  %-12s %s\n  %-12s %s\n", "help", "print this help", "version", "print the version");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    zt::init_threads_from_env();
    if (args.empty()) {
      print_usage();
      return 2;
    }
    const std::string name = args[0];
    args.erase(args.begin());
    if (name == "help" || name == "--help" || name == "-h") {
      print_usage();
      return 0;
    }
    if (name == "version" || name == "--version") {
      std::printf("zerotrain %s\n", kVersion);
      return 0;
    }
    std::vector<std::string> names;
    for (const auto& c : zt::cli::commands()) {
      if (c.name == name) {
        if (zt::cli::wants_help(args)) {
          std::fputs(c.help.c_str(), stdout);
          return 0;
        }
        return c.run(args);
      }
      names.push_back(c.name);
    }
    const std::string best = zt::cli::closest(name, names);
    ZT_THROW_INPUT("unknown command '", name, "'", best.empty() ? std::string() : " (did you mean " + best + "?)",
                   ": see 'zerotrain help'");
  } catch (const zt::Error& e) {
    end_job_if_one_of_many_ranks(std::string("error: ") + e.what(), e.exit_code());
    std::fprintf(stderr, "zerotrain: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    end_job_if_one_of_many_ranks(std::string("internal error: ") + e.what(), 1);
    std::fprintf(stderr, "zerotrain: internal error: %s\n", e.what());
    return 1;
  }
}
