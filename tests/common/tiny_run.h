// The tiny-gpt2 run e2e tests train through the real command (one license text, 4 steps of
// 2 x 32 tokens), and the `zerotrain train` line they run it with.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

#include "common/shell.h"

namespace zt::testing {

// Writes `dir`/run.yaml (creating `dir`): tiny-gpt2 on data/text/artistic.txt, 4 steps, a
// checkpoint every `save_interval` steps keeping the last `keep_last`, output_dir `dir`/run.
inline std::filesystem::path write_tiny_run(const std::filesystem::path& dir, int save_interval, int keep_last) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path yaml = dir / "run.yaml";
  std::ofstream(yaml) << "model: {preset: tiny-gpt2}\n"
                         "data:\n  train: ['"
                      << ZT_SOURCE_DIR
                      << "/data/text/artistic.txt']\n  seq_len: 32\n"
                         "per_device_train_batch_size: 2\ngradient_accumulation_steps: 1\n"
                         "learning_rate: 1.0e-3\nmax_steps: 4\nsave_interval: "
                      << save_interval << "\nkeep_last: " << keep_last
                      << "\nsteps_per_print: 1\nseed: 3\noutput_dir: '" << (dir / "run").string() << "'\n";
  return yaml;
}

// `env` zerotrain train `yaml` --threads 1 `args`.
inline ShellResult train_tiny_run(const std::filesystem::path& yaml, const std::string& args,
                                  const std::string& env = "") {
  return sh(env + " " + zerotrain_binary() + " train " + yaml.string() + " --threads 1 " + args);
}

}  // namespace zt::testing
