// The token shards a run reads: given directly (.bin shards: zerotrain, llm.c or nanoGPT
// format), or prepared from text/JSONL inputs into <output_dir>/data with the run's
// tokenizer (as `zerotrain prepare` would), holding out a share of the documents for
// validation when no validation set is named.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "config/config.h"

namespace zt::train {

struct DataSetup {
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;  // may be empty: no validation
};

// What the other ranks of a job read once rank 0 has set the run up: the tokenizer it
// trained (output_dir/tokenizer.json) and the shards it prepared (output_dir/data,
// output_dir/data_validation) in place of the text inputs, so that only one process
// writes them.
config::TrainConfig config_reading_prepared_files(const config::TrainConfig& config,
                                                  const std::filesystem::path& output_dir);

// seq_len: the run's window. SFT samples padded into windows of their own (data.packing:
// false) keep their first seq_len + 1 tokens: when none keeps a target (every prompt fills
// the window) nothing would train, BadInput with the fix; some without one are a warning
// (on the main rank) naming their records.
DataSetup setup_data(const config::TrainConfig& config, const io::Tokenizer& tokenizer,
                     const std::filesystem::path& output_dir, int64_t seq_len, bool main_rank);

}  // namespace zt::train
