// Writing a directory atomically: everything is written into a staging directory beside
// the target (same filesystem), which replaces the target in one rename when complete.
// Readers never see a half-written model or dataset; a failure (or an exception before
// commit) removes the staging directory and leaves any previous target untouched.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace zt::io {

class StagingDir {
 public:
  // Creates `<target>.tmp-<pid>-<n>` next to `target` (its parent must exist or is created),
  // first removing (with a warning) those of dead processes (remove_stale_staging).
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
  // rest of the old target is deleted. The swap is replace_directory's: at every instant
  // `target` is either the whole old directory or the whole new one.
  void commit(const std::function<bool(const std::string& name)>& keep = {});

 private:
  std::string target_;
  std::string staging_;
  bool committed_ = false;
};

// Puts the complete directory `staged` in place of `target` (which may not exist). An
// existing target is swapped with `staged` in one atomic renameat2(RENAME_EXCHANGE) and
// the old one, now at `staged`, is deleted: no instant without a whole `target`. Where
// the filesystem cannot exchange, the old target is renamed aside to `aside` first (the
// one instant without a target; readers of a checkpoint root fall back to another
// complete checkpoint). A crash before the delete leaves the old directory at `staged` or
// `aside`: remove_stale_staging (or the checkpoint root's cleanup) removes it at the next
// start. Throws Io naming the paths.
void replace_directory(const std::string& staged, const std::string& target, const std::string& aside);

// Staging and aside directories of `target` (`<target>.tmp-<pid>-<n>`, `<target>.old-<pid>-<n>`)
// left by processes that no longer run (killed mid-save): removes them, returns their paths.
// Those of a live process (another run, or this one) are left alone.
std::vector<std::string> remove_stale_staging(const std::string& target);

// The temporary files of io::write_file_atomic (`<name>.tmp.<pid>.<n>`) directly in `dir`
// whose process no longer runs (killed mid-write: the tokenizer, token shards, `latest`):
// removes them, returns their paths.
std::vector<std::string> remove_stale_atomic_temps(const std::string& dir);

// Whether process `pid` still runs on this machine (false when it does not exist).
bool process_alive(long pid);

// Copies a regular file (atomically: temporary + rename). Throws BadInput when `src` is
// missing, Io on write errors.
void copy_file_atomic(const std::string& src, const std::string& dst);

}  // namespace zt::io
