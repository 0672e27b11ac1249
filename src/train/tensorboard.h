// TensorBoard event files, as torch.utils.tensorboard's SummaryWriter writes them, for
// HF's `report_to: tensorboard`: scalars only (the step line's numbers and the
// validation loss), under logging_dir (default output_dir/runs).
//
// The format: a file events.out.tfevents.<unix seconds>.<host> of TFRecord records
// (uint64 length, its masked CRC-32C, the bytes, their masked CRC-32C), each an `Event`
// protocol buffer (tensorflow/core/util/event.proto): the first carries file_version
// "brain.Event:2", the others wall_time, step and a Summary of one simple_value. The few
// protobuf fields are written by hand (no protobuf dependency).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace zt::train {

// CRC-32C (Castagnoli), as TFRecord frames use it.
uint32_t crc32c(const void* data, size_t bytes);

class TensorBoardWriter {
 public:
  // Creates `dir` when missing and a new event file in it (BadInput naming the folder when
  // it cannot be written).
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // A write that fails (a full disk, a quota, an I/O error) is one warning naming the file,
  // the error and the step from which events are lost; the run goes on (losing plots must
  // not cost a long training run; metrics.jsonl and the log lines still have the numbers)
  // and the file is not written again.
  void scalar(const std::string& tag, double value, int64_t step);
  // Pushes what was written to the file (TensorBoard reads it while the run goes).
  void flush();
  const std::string& path() const { return path_; }
  bool failed() const { return state_ == State::Failed; }

 private:
  enum class State { Writing, Failed };
  void record(const std::string& event);
  void fail(int err);

  std::string path_;
  std::FILE* file_ = nullptr;
  State state_ = State::Writing;
  int64_t step_ = -1;  // of the event being written, for the warning
};

}  // namespace zt::train
