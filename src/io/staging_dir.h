// Writing a directory atomically: everything is written into a staging directory beside
// the target (same filesystem), which replaces the target in one rename when complete.
// Readers never see a half-written model or dataset; a failure (or an exception before
// commit) removes the staging directory and leaves any previous target untouched.
#pragma once
#include <functional>
#include <string>

namespace zt::io {

class StagingDir {
 public:
  // Creates `<target>.tmp-<pid>-<n>` next to `target` (its parent must exist or is created).
  // Throws BadInput when `target` exists and is not a directory.
  explicit StagingDir(std::string target);
  ~StagingDir();  // removes the staging directory unless committed
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::string& path() const { return staging_; }
  std::string file(const std::string& name) const { return staging_ + "/" + name; }
  const std::string& target() const { return target_; }

  // Moves the staging directory into place. When the target already exists, entries of
  // the old target for which `keep(name)` is true and that the new one does not have are
  // moved over (a model directory keeps a README, a dataset directory its notes); the
  // rest of the old target is deleted. The swap is two renames: between them the old
  // directory is at `<target>.old-<pid>-<n>`.
  void commit(const std::function<bool(const std::string& name)>& keep = {});

 private:
  std::string target_;
  std::string staging_;
  bool committed_ = false;
};

// Copies a regular file (atomically: temporary + rename). Throws BadInput when `src` is
// missing, Io on write errors.
void copy_file_atomic(const std::string& src, const std::string& dst);

}  // namespace zt::io
