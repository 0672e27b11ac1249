#include "io/hf_dataset_dir.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_file.h"

namespace zt::io {
namespace fs = std::filesystem;

namespace {
nlohmann::json read_json(const fs::path& p, const char* what) {
  try {
    return nlohmann::json::parse(read_bounded_file(p.string(), what));
  } catch (const nlohmann::json::exception& e) {
    ZT_THROW_INPUT(p.string(), ": not valid JSON (", e.what(), ")");
  }
}
}  // namespace

HfDatasetDir hf_dataset_dir_kind(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::is_directory(d, ec)) return HfDatasetDir::None;
  if (fs::is_regular_file(d / "state.json", ec) && fs::is_regular_file(d / "dataset_info.json", ec))
    return HfDatasetDir::Dataset;
  if (fs::is_regular_file(d / "dataset_dict.json", ec)) return HfDatasetDir::DatasetDict;
  return HfDatasetDir::None;
}

std::vector<std::string> hf_dataset_files(const std::string& dir) {
  const fs::path state = fs::path(dir) / "state.json";
  const nlohmann::json j = read_json(state, "save_to_disk state.json");
  const auto files = j.is_object() ? j.find("_data_files") : j.end();
  if (!j.is_object() || files == j.end() || !files->is_array())
    ZT_THROW_INPUT(state.string(), ": no \"_data_files\" list; is this a datasets save_to_disk folder? "
                   "(save it again with Dataset.save_to_disk)");
  std::vector<std::string> out;
  for (const auto& f : *files) {
    const auto name = f.is_object() ? f.find("filename") : f.end();
    if (!f.is_object() || name == f.end() || !name->is_string())
      ZT_THROW_INPUT(state.string(), ": a \"_data_files\" entry without a \"filename\" string: ", f.dump());
    const std::string n = name->get<std::string>();
    // A name, not a path: state.json may not point outside its folder.
    if (n.empty() || n.find('/') != std::string::npos || n == "." || n == "..")
      ZT_THROW_INPUT(state.string(), ": \"_data_files\" names '", n, "', which is not a file name in the folder");
    const fs::path p = fs::path(dir) / n;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      ZT_THROW_INPUT(state.string(), ": names ", n, ", which is missing from ", dir,
                     " (an incomplete copy? copy the whole folder again)");
    out.push_back(p.string());
  }
  if (out.empty()) ZT_THROW_INPUT(state.string(), ": the dataset has no data files");
  return out;
}

void refuse_dataset_dict(const std::string& dir) {
  const fs::path file = fs::path(dir) / "dataset_dict.json";
  const nlohmann::json j = read_json(file, "save_to_disk dataset_dict.json");
  std::string splits, first;
  if (j.is_object() && j.contains("splits") && j["splits"].is_array())
    for (const auto& s : j["splits"])
      if (s.is_string()) {
        splits += (splits.empty() ? "" : ", ") + s.get<std::string>();
        if (first.empty()) first = s.get<std::string>();
      }
  if (first.empty()) first = "train";
  ZT_THROW_INPUT(dir, ": a datasets DatasetDict (splits: ", splits.empty() ? "none listed" : splits,
                 "); name one split's folder, e.g. ", (fs::path(dir) / first).string(),
                 " (and another split as data.validation)");
}

}  // namespace zt::io
