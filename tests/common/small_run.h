// The small CPU training run that the trainer and Accelerator end-to-end tests share.
#pragma once
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "config/run_config.h"

namespace zt::testing {

// A small run on two of the repo's license texts: seq_len 32, micro batch 4, accumulation 2,
// 6 steps (cosine with warmup), checkpoints and evaluation every 3 steps, output under out/run.
// Writes its run.yaml into `out` (output_dir out/run) and returns the file's path, for a
// `zerotrain train` command line.
inline std::filesystem::path small_run_yaml(const std::filesystem::path& out) {
  const std::filesystem::path yaml = out / "run.yaml";
  std::ofstream(yaml) << "model: {preset: tiny-gpt2}\n"
                         "data:\n  train: ['"
                      << ZT_SOURCE_DIR << "/data/text/artistic.txt', '" << ZT_SOURCE_DIR
                      << "/data/text/apache-2.0.txt']\n"
                         "  validation_fraction: 0.5\n  seq_len: 32\n"
                         "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n"
                         "learning_rate: 3.0e-3\nlr_scheduler_type: cosine\nwarmup_steps: 2\n"
                         "max_steps: 6\nsave_interval: 3\nkeep_last: 5\neval_interval: 3\neval_batches: 2\n"
                         "steps_per_print: 1\nseed: 7\noutput_dir: '"
                      << (out / "run").string() << "'\n";
  return yaml;
}

inline config::TrainConfig small_run(const std::filesystem::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{small_run_yaml(out).string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return config::load_train_config(args);
}

// The whole content of a file, read as bytes.
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace zt::testing
