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

  void scalar(const std::string& tag, double value, int64_t step);
  // Pushes what was written to the files (readable while the run goes).
  void flush();
  const std::string& dir() const { return dir_; }

  // The file name DeepSpeed gives a tag's CSV.
  static std::string file_name(const std::string& tag);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::FILE* open(const std::string& tag);

  std::string dir_;
  std::map<std::string, std::unique_ptr<std::FILE, Closer>> files_;  // by tag
};

}  // namespace zt::train
