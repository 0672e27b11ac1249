// The one reader of files that are parsed whole into memory as configs: run config YAML,
// ds_config.json, Accelerate YAML, HF config.json / generation_config.json, safetensors
// index files, tokenizer files, hostfiles. A config must be a regular file under a size cap:
// a directory, a device (/dev/zero, which never ends), a FIFO or an oversized file is a
// BadInput error naming the path, never an empty config or a read until memory runs out.
#pragma once
#include <cstdint>
#include <string>

namespace zt::io {

// Configs are kilobytes; 16 MiB leaves room for machine-written ones (a sharded model's
// safetensors index lists every tensor) and still bounds a mistaken path.
inline constexpr uint64_t kConfigFileCap = 16ull << 20;
// Tokenizer files of large vocabularies (tokenizer.json of Gemma's 256k vocabulary is
// ~33 MB) are read the same way with a larger cap.
inline constexpr uint64_t kTokenizerFileCap = 512ull << 20;

// The whole of `path`, which must be a regular file of at most `cap` bytes. `what` names
// the file's role in errors ("run config", "--deepspeed config", ...). Throws BadInput.
std::string read_bounded_file(const std::string& path, const std::string& what, uint64_t cap = kConfigFileCap);

// The same checks without reading, for files a library opens itself (SentencePiece's
// tokenizer.model); returns the size.
uint64_t check_bounded_file(const std::string& path, const std::string& what, uint64_t cap = kConfigFileCap);

}  // namespace zt::io
