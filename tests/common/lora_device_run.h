// A LoRA run (small_run, r 4) on an HF-made tiny base of tests/data/hf on a device, for the
// CUDA tests that train the same run on the GPU and on the CPU and compare the losses.
#pragma once
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/fixture_tokenizer.h"
#include "common/small_run.h"
#include "train/trainer.h"

namespace zt::testing {

// The run's files in dir/<device> (its tokenizer in dir, shared by the devices' runs).
inline train::TrainResult lora_device_run(const std::filesystem::path& dir, const std::string& base,
                                          const std::string& device, const std::vector<std::string>& lora) {
  std::filesystem::create_directories(dir);
  if (!std::filesystem::exists(dir / "tok.json")) write_fixture_tokenizer(dir);
  std::vector<std::string> args{"--model.preset",    "",
                                "--model.path",      std::string(ZT_SOURCE_DIR) + "/tests/data/hf/" + base,
                                "--model.tokenizer", (dir / "tok.json").string(),
                                "--lora.r",          "4",
                                "--device",          device};
  args.insert(args.end(), lora.begin(), lora.end());
  std::filesystem::create_directories(dir / device);  // small_run writes its run.yaml there
  return train::run_training(small_run(dir / device, args));
}

// max |a - b| / |b| over the common length.
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return d;
}

}  // namespace zt::testing
