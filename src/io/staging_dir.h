// Writing a directory atomically: everything is written into a staging directory beside
// the target (same filesystem), which replaces the target in one exchange when complete.
// Readers never see a half-written model or dataset; a failure (or an exception before
// commit) removes the staging directory and leaves any previous target untouched.
//
// The staging directory is `<target>.tmp-<pid>-<n>/dir`, inside a marked folder
// (io/output_file.h): the clean-up of a killed process's leftovers removes only marked
// folders, never a user's `<target>.old-2024-01-15`. Staging never holds a file it did
// not create: the entries of the old target that a commit keeps (a README, a `.git/`) are
// hard-linked (copied where links are refused) into the staging directory, never moved,
// so a kill at any moment leaves them in the old target or in the new one, never only in
// a folder that the next run deletes.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "io/output_file.h"

namespace zt::io {

class StagingDir {
 public:
  // Creates the marked folder `<target>.tmp-<pid>-<n>` next to `target` (its parent must
  // exist or is created) and the staging directory in it, first cleaning up (with a
  // warning) what dead processes left for this target (remove_stale_staging).
  // Throws BadInput when `target` exists and is not a directory.
  explicit StagingDir(std::string target);
  ~StagingDir();  // removes the staging folder unless committed
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::string& path() const { return staging_; }
  std::string file(const std::string& name) const { return staging_ + "/" + name; }
  const std::string& target() const { return target_; }

  // Moves the staging directory into place. When the target already exists, entries of
  // the old target for which `keep(name)` is true and that the new one does not have are
  // carried over (a model directory keeps a README, a dataset directory its notes): hard
  // links (copies where the filesystem refuses links) of files, directories rebuilt, links
  // re-made. The rest of the old target is deleted. The swap is replace_directory's: at
  // every instant `target` is either the whole old directory or the whole new one.
  void commit(const std::function<bool(const std::string& name)>& keep = {});

 private:
  std::string target_;
  std::string folder_;   // the marked folder <target>.tmp-<pid>-<n>
  std::string staging_;  // folder_/dir: what becomes the target
  bool committed_ = false;
};

// Puts the complete directory `staged` in place of `target` (which may not exist). An
// existing target is swapped with `staged` in one atomic renameat2(RENAME_EXCHANGE) and
// the old one, now at `staged`, is deleted: no instant without a whole `target`. Where
// the filesystem cannot exchange, the old target is renamed into a marked folder `aside`
// (created here, as `aside`/dir) first: the one instant without a target, which
// remove_stale_staging (or the checkpoint root's clean-up) repairs by putting the old one
// back. `staged` should lie in a marked folder too, so that a crash before the delete
// leaves only marked folders. Throws Io naming the paths.
void replace_directory(const std::string& staged, const std::string& target, const std::string& aside);

// The directory a marked aside folder holds (`aside` + "/dir").
std::string aside_content(const std::string& aside);

// What processes that no longer run left for `target` (killed mid-save): marked folders
// `<target>.tmp-<pid>-<n>` are removed; a marked `<target>.old-<pid>-<n>` is put back as
// `target` when `target` is missing (a crash between the two renames of the no-exchange
// path), else removed. Returns the paths removed or put back. Folders without the marker
// (a user's `<target>.old-2024-01-15`) and those of a live process are left alone.
std::vector<std::string> remove_stale_staging(const std::string& target);

// remove_stale_staging for every target with leftovers directly in `dir`: the marked
// temporaries of io::write_file_atomic and StagingDir (`<name>.tmp-<pid>-<n>`) and aside
// folders (`<name>.old-<pid>-<n>`) of processes that no longer run (killed mid-write: the
// tokenizer, token shards, `latest`, final/). Returns the paths removed.
std::vector<std::string> remove_stale_atomic_temps(const std::string& dir);

// Whether process `pid` still runs on this machine (false when it does not exist).
bool process_alive(long pid);

}  // namespace zt::io
