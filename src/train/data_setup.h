// The token shards a run reads: given directly (.bin shards: zerotrain, llm.c or nanoGPT
// format), or prepared from text/JSONL inputs into <output_dir>/data with the run's
// tokenizer (as `zerotrain prepare` would), holding out a share of the documents for
// validation when no validation set is named.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "train/config.h"

namespace zt::train {

struct DataSetup {
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;  // may be empty: no validation
};

DataSetup setup_data(const TrainConfig& config, const io::Tokenizer& tokenizer, const std::filesystem::path& output_dir);

}  // namespace zt::train
