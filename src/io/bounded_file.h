// The one guard of files zerotrain reads from paths users give: configs (run config YAML,
// ds_config.json, Accelerate YAML, HF config.json / generation_config.json, safetensors
// index files, hostfiles), tokenizer and chat template files, training and evaluation data
// (text, JSONL, Arrow, Parquet, token shards), a run's metrics.jsonl and a checkpoint
// folder's `latest`. Each must be a regular file: a directory, a device (/dev/zero never
// ends), a FIFO (its open() waits for a writer forever) or a socket is a BadInput error
// naming the path and what it is, never an empty input, a read until memory runs out or a
// hang. Files are opened with O_NONBLOCK, so even a FIFO swapped in after a check cannot
// block the open; files parsed whole are read under a size cap.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

namespace zt::io {

// Configs are kilobytes; 16 MiB leaves room for machine-written ones (a sharded model's
// safetensors index lists every tensor) and still bounds a mistaken path.
inline constexpr uint64_t kConfigFileCap = 16ull << 20;
// Tokenizer files of large vocabularies (tokenizer.json of Gemma's 256k vocabulary is
// ~33 MB) are read the same way with a larger cap.
inline constexpr uint64_t kTokenizerFileCap = 512ull << 20;
// No cap but the file's own size (data files of many GB are streamed or mapped).
inline constexpr uint64_t kNoCap = std::numeric_limits<uint64_t>::max();

// "a directory", "a FIFO", "a character device", "a block device", "a socket", "a regular
// file": what a stat mode is, for messages.
std::string file_kind_name(unsigned mode);

// A regular file open for reading (RAII: closed by the destructor). Opened without
// following a FIFO into a wait; the descriptor is blocking again once the file is known to
// be regular. Throws BadInput naming the path, what it is and the `what` role ("eval
// --data file", "run config", ...) for anything else or a missing path; Io for other
// errors.
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at the open
  // The whole file; BadInput when it has (or grows to) more than `cap` bytes.
  std::string read_all(uint64_t cap);

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of `path`, which must be a regular file of at most `cap` bytes. `what` names
// the file's role in errors ("run config", "--deepspeed config", ...). Throws BadInput.
std::string read_bounded_file(const std::string& path, const std::string& what, uint64_t cap = kConfigFileCap);

// The same checks without reading, for files another reader opens itself afterwards
// (SentencePiece's tokenizer.model, streamed data files): returns the size. The open in
// between cannot block on a FIFO: this one was made with O_NONBLOCK and closed again.
uint64_t check_bounded_file(const std::string& path, const std::string& what, uint64_t cap = kConfigFileCap);

}  // namespace zt::io
