// Folders written by HF `datasets`' save_to_disk, given as training data.
//
// A Dataset folder holds state.json ({"_data_files": [{"filename": "data-00000-of-00002.arrow"},
// ...], ...}), dataset_info.json and the data files (Arrow IPC streams). The rows are the
// data files in state.json's order (what load_from_disk concatenates); the folder's other
// .arrow files (cache-*.arrow left by .map()) and its JSON are not data.
// A DatasetDict folder holds dataset_dict.json ({"splits": ["train", "test"]}) and one
// Dataset folder per split: which split to train on is the user's choice, so it is an
// error naming the splits.
#pragma once
#include <string>
#include <vector>

namespace zt::io {

enum class HfDatasetDir { None, Dataset, DatasetDict };

HfDatasetDir hf_dataset_dir_kind(const std::string& dir);

// The data files of a Dataset folder, in state.json's order. BadInput naming state.json
// when it is malformed or names a missing file.
std::vector<std::string> hf_dataset_files(const std::string& dir);

// BadInput for a DatasetDict folder: names its splits and the folder to give instead.
[[noreturn]] void refuse_dataset_dict(const std::string& dir);

}  // namespace zt::io
