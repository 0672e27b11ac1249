#include "io/data_format.h"
#include "core/strings.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "io/bounded_file.h"

namespace zt::io {

namespace {

constexpr size_t kSniffBytes = 64 * 1024;

// All of `out` from `offset`; false on an error or a file shorter than when it was sized.
bool read_at(int fd, std::string& out, uint64_t offset) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

uint32_t u32_at(std::string_view s, size_t i) {
  uint32_t v;
  std::memcpy(&v, s.data() + i, 4);
  return v;  // little-endian hosts only (as every format zerotrain reads)
}

// The offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code
// points past U+10FFFF included), or npos. A sequence cut by the end of `s` is fine: `s`
// is a prefix of the file.
size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n) return std::string_view::npos;  // cut by the sample's end
      const unsigned b = p[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// What a binary file looks like, from its magic; empty when no magic is known.
std::string known_binary(std::string_view head, uint64_t file_size) {
  struct Magic {
    std::string_view bytes;
    const char* what;
  };
  static const Magic kMagics[] = {
      {"\x1f\x8b", "a gzip-compressed file; decompress it first (gunzip -k FILE, or zcat FILE > FILE.txt)"},
      {"\x28\xb5\x2f\xfd", "a zstd-compressed file; decompress it first (zstd -d FILE)"},
      {std::string_view("\xfd"
                        "7zXZ\0",
                        6),
       "an xz-compressed file; decompress it first (unxz -k FILE)"},
      {"PK\x03\x04", "a zip archive (or a PyTorch .pt/.bin, a NumPy .npz); unpack the text files from it"},
      {"ZTTOKENS", "a zerotrain token shard; name it in data.train as a shard (a .bin file), not as text"},
      {"\x93NUMPY", "a NumPy .npy array; give token shards as .bin files (np.uint16 tofile) or text as text"},
      {std::string_view("GGUF\x03\0", 6), "a GGUF model file, not training data"},
      {"\x7f"
       "ELF",
       "an executable (ELF), not training data"},
      {"\x89PNG", "a PNG image, not training data"},
      {"\xff\xd8\xff", "a JPEG image, not training data"},
      {"\xff\xfe", "UTF-16 text; convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8)"},
      {"\xfe\xff", "UTF-16 text; convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8)"},
  };
  for (const Magic& m : kMagics)
    if (starts_with(head, m.bytes)) return m.what;
  if (head.size() >= 8 && u32_at(head, 0) == 20240520u)
    return "an llm.c token shard; name it in data.train as a shard (a .bin file), not as text";
  // safetensors: u64 header length, then the JSON header.
  if (head.size() >= 10 && head[8] == '{' && head[9] == '"') {
    uint64_t n;
    std::memcpy(&n, head.data(), 8);
    if (n > 1 && n + 8 <= file_size) return "a safetensors weights file, not training data";
  }
  // Pickle protocol 2-5 (pytorch_model.bin's data.pkl, .pkl files).
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5)
    return "a Python pickle, not training data";
  return "";
}

// The Arrow IPC stream's first message: 0xFFFFFFFF, a metadata length, then a FlatBuffers
// Message whose header is a Schema. Checked far enough to tell it from other binary data
// starting with 0xFF bytes (the reader validates the rest).
bool looks_like_arrow_stream(std::string_view head, uint64_t file_size) {
  if (head.size() < 16 || u32_at(head, 0) != 0xFFFFFFFFu) return false;
  const uint32_t len = u32_at(head, 4);
  return len >= 8 && len + 8 <= file_size;
}

}  // namespace

const char* data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::Text:
      return "text";
    case DataFormat::Jsonl:
      return "JSON Lines";
    case DataFormat::ArrowStream:
      return "Arrow IPC stream";
    case DataFormat::ArrowFile:
      return "Arrow IPC file";
    case DataFormat::Parquet:
      return "Parquet";
  }
  return "?";
}

bool has_jsonl_name(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".ndjson") || ends_with(path, ".json");
}

DataFormat detect_data_format(const std::string& path) {
  // The first reader of every data file (prepare, eval, tokenizer training): a FIFO, a
  // device or a directory stops here with what it is, before any open could block or a
  // read could go on forever.
  const InputFile in(path, "data file");
  const uint64_t size = in.size();
  std::string head(static_cast<size_t>(std::min<uint64_t>(size, kSniffBytes)), '\0');
  std::string tail(static_cast<size_t>(std::min<uint64_t>(size, 6)), '\0');
  if (!read_at(in.fd(), head, 0) || !read_at(in.fd(), tail, size - tail.size()))
    ZT_THROW_IO(path, ": read error (", std::strerror(errno), ")");

  const std::string_view h(head);
  const bool has_nul = h.find('\0') != std::string_view::npos;
  // A magic at both ends; at the start only, a cut-off copy (text that happens to start
  // with the letters has no NUL bytes and goes on to the text checks).
  if (starts_with(h, "PAR1")) {
    if (size >= 12 && tail.substr(2) == "PAR1") return DataFormat::Parquet;
    if (has_nul)
      ZT_THROW_INPUT(path, ": a truncated Parquet file (\"PAR1\" at the start but not at the end); copy it again");
  }
  if (starts_with(h, "PARE") && size >= 12 && tail.substr(2) == "PARE")
    ZT_THROW_INPUT(path, ": an encrypted Parquet file (\"PARE\"); zerotrain reads unencrypted Parquet only");
  if (starts_with(h, "ARROW1")) {
    if (tail == "ARROW1") return DataFormat::ArrowFile;
    if (has_nul)
      ZT_THROW_INPUT(path, ": a truncated Arrow IPC file (\"ARROW1\" at the start but not at the end); write it again");
  }
  if (looks_like_arrow_stream(h, size)) return DataFormat::ArrowStream;

  const std::string binary = known_binary(h, size);
  const char* fix = "; give text, JSON Lines (.jsonl), Arrow (.arrow, a save_to_disk folder) or Parquet (.parquet)";
  if (!binary.empty()) ZT_THROW_INPUT(path, ": not text: this is ", binary);
  if (const size_t nul = h.find('\0'); nul != std::string_view::npos)
    ZT_THROW_INPUT(path, ": binary data (a NUL byte at offset ", nul, "), not text", fix);
  if (const size_t bad = first_invalid_utf8(h); bad != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(h[bad])));
    ZT_THROW_INPUT(path, ": not UTF-8 text (byte ", byte, " at offset ", bad, " is not valid UTF-8)", fix,
                   "; convert other encodings first (iconv -f LATIN1 -t UTF-8 FILE)");
  }
  return has_jsonl_name(path) ? DataFormat::Jsonl : DataFormat::Text;
}

}  // namespace zt::io
