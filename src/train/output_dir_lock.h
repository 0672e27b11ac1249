// Who owns an output_dir: one run at a time (an advisory flock on output_dir/.zerotrain.lock
// holding the owner's pid, for the run's life), and a new run does not overwrite a
// previous one's checkpoints, final/ and metrics.jsonl unless told to.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace zt::train {

// How this run treats what a previous run left in output_dir.
enum class OutputDirUse {
  Fresh,      // no --resume: the directory must not hold a run
  Resume,     // --resume latest|auto|DIR: continues what is there
  Overwrite,  // overwrite_output_dir: the previous run's files are removed first
};

// The previous run's files in dir ("checkpoints/", "final/", "metrics.jsonl"), in that
// order; empty when dir holds no run (prepared tokenizer/data files, an empty checkpoints/
// and an empty metrics.jsonl — a run that failed at start-up — do not count).
std::vector<std::string> previous_run_files(const std::filesystem::path& dir);

// An exclusive flock on dir/.zerotrain.lock while alive (RAII; the kernel drops it when
// the process dies, so a killed run never leaves a stale lock). The file holds the
// owner's pid for the message a second run gets. Throws BadInput (exit 2) naming that pid
// when another process holds it, and when the lock's name is a symbolic link or not a
// regular file (opened with O_NOFOLLOW: a planted link is never followed).
class OutputDirLock {
 public:
  explicit OutputDirLock(const std::filesystem::path& dir);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Rank 0's claim on output_dir (created when missing): refuses a directory another run
// holds (its pid named) or, with use Fresh, one that holds a previous run (naming --resume
// and --overwrite_output_dir), touching nothing; with Overwrite removes the previous
// run's files once the lock is held. The lock lives as long as the returned object.
std::unique_ptr<OutputDirLock> claim_output_dir(const std::filesystem::path& dir, OutputDirUse use);

}  // namespace zt::train
