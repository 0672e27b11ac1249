// The byte-level tokenizer of the built-in default run: token i < 256 is byte i.
// (HF tokenizers — BPE from tokenizer.json, vocab.json + merges.txt, SentencePiece —
// come with the files issue.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt::io {

inline std::vector<int32_t> byte_encode(const std::string& text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

// Ids >= 256 (specials, unused vocabulary) are dropped.
inline std::string byte_decode(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids)
    if (id >= 0 && id < 256) s.push_back(static_cast<char>(id));
  return s;
}

// Reads a whole file; throws BadInput naming it when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace zt::io
