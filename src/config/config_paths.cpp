#include "config/config_paths.h"

#include <glob.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"

namespace zt::config {

namespace {

// A path, or a glob pattern matching something (token shards may be named as "shards/*.bin").
bool exists_or_matches(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return true;
  glob_t g{};
  const bool matched = ::glob(path.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  ::globfree(&g);
  return matched;
}

// `origin_key`: the name the key's origin is recorded under (model.path's is "model").
void require_exists(const TrainConfig& c, const std::string& key, const std::string& origin_key,
                    const std::string& path) {
  if (path.empty() || exists_or_matches(path)) return;
  const auto it = c.origin.find(origin_key);
  const std::string from = it == c.origin.end() ? "" : " (from " + it->second + ")";
  ZT_THROW_INPUT(key, ": '", path, "' does not exist", from,
                 "; fix the path (a relative path written in a config file is taken from that file's directory, "
                 "one given on the command line from the current directory; write $PWD/PATH in a file for the "
                 "current directory)");
}

}  // namespace

std::string path_in_file(const std::string& path, const std::string& naming_file) {
  namespace fs = std::filesystem;
  for (const std::string prefix : {"$PWD", "${PWD}"}) {
    if (path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = path.substr(prefix.size());
    if (!rest.empty() && rest[0] != '/') continue;  // $PWDX is a name, not the variable
    std::error_code ec;
    const fs::path cwd = fs::current_path(ec);
    if (ec) ZT_THROW_INPUT(path, ": the current directory cannot be read (", ec.message(), ")");
    return rest.empty() ? cwd.string() : (cwd / rest.substr(1)).string();
  }
  if (path.empty() || fs::path(path).is_absolute() || naming_file.empty()) return path;
  return (fs::path(naming_file).parent_path() / path).string();
}

void check_named_paths(const TrainConfig& c) {
  require_exists(c, "model.path", "model", c.model.path);
  require_exists(c, "model.config", "model", c.model.config_file);
  require_exists(c, "model.tokenizer", "model.tokenizer", c.model.tokenizer);
  for (const std::string& p : c.data.train) require_exists(c, "data.train", "data.train", p);
  for (const std::string& p : c.data.validation) require_exists(c, "data.validation", "data.validation", p);
}

}  // namespace zt::config
