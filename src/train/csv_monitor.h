// DeepSpeed's csv_monitor: one CSV file per tag in output_path/job_name, named after the tag
// with '/' and ' ' turned into '_' (Train/Samples/train_loss -> Train_Samples_train_loss.csv),
// a header `step,<the tag's last part>` and a row `step,value` per logged step, as
// deepspeed/monitor/csv_monitor.py writes them. Files are appended to, so a resumed run
// continues its curves; the header is written only into a new (empty) file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

namespace zt::train {

class CsvMonitor {
 public:
  // Creates `dir` when missing (BadInput naming the folder and the ds_config key when it
  // cannot be written).
  explicit CsvMonitor(std::string dir);

  // A write that fails (a full disk, a quota, an I/O error) is one warning naming the file
  // and the error; the run goes on without CSV rows from then on (the files are not
  // written again: no torn rows after a partial write).
  void scalar(const std::string& tag, double value, int64_t step);
  // Pushes what was written to the files (readable while the run goes).
  void flush();
  bool failed() const { return state_ == State::Failed; }
  const std::string& dir() const { return dir_; }

  // The file name DeepSpeed gives a tag's CSV.
  static std::string file_name(const std::string& tag);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  enum class State { Writing, Failed };
  std::FILE* open(const std::string& tag);
  void fail(const std::string& tag, int err);

  std::string dir_;
  State state_ = State::Writing;
  int64_t step_ = -1;                                                // of the row being written, for the warning
  std::map<std::string, std::unique_ptr<std::FILE, Closer>> files_;  // by tag
};

}  // namespace zt::train
