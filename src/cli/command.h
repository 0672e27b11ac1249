// Subcommands register themselves here (one file per command, src/cli/<name>_cmd.cpp):
//   static const zt::cli::Registrar reg{{"train", "train a model", run_train, kTrainHelp}};
#pragma once
#include <string>
#include <vector>

namespace zt::cli {

using Args = std::vector<std::string>;

struct Command {
  std::string name;
  std::string summary;  // one line for `zerotrain help`
  int (*run)(const Args& args);
  std::string help;  // full help for `zerotrain <name> --help`
};

struct Registrar {
  explicit Registrar(Command command);
};

const std::vector<Command>& commands();

}  // namespace zt::cli
