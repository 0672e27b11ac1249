// Unicode for the tokenizers: UTF-8 decoding/validation and the code point classes the
// pre-tokenizer regexes use (\p{L}, \p{N}, \s as Oniguruma in HF tokenizers has them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zt::io::unicode {

enum class CodePointClass : uint8_t { Other, Letter, Number, Space };

struct CodePointRange {
  uint32_t first, last;  // inclusive
  CodePointClass cls;
};
// Generated table (unicode_tables.cpp, tools/gen_unicode_tables.py): sorted, disjoint.
extern const CodePointRange kCodePointRanges[];
extern const size_t kNumCodePointRanges;

CodePointClass classify(uint32_t cp);
inline bool is_letter(uint32_t cp) { return classify(cp) == CodePointClass::Letter; }
inline bool is_number(uint32_t cp) { return classify(cp) == CodePointClass::Number; }
inline bool is_space(uint32_t cp) { return classify(cp) == CodePointClass::Space; }

// Decodes the code point at s[i] of VALID UTF-8 (see to_valid_utf8) and its byte length.
inline uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0xE0) {
    *len = 2;
    return ((b0 & 0x1Fu) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return ((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
  }
  *len = 4;
  return ((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

void append_utf8(std::string& out, uint32_t cp);

// Text as HF tokenizers sees it: Rust strings hold only valid UTF-8, so invalid input is
// replaced like Python's bytes.decode(errors="replace") and Rust's from_utf8_lossy do:
// each maximal invalid subpart becomes one U+FFFD. Valid input is returned unchanged.
bool is_valid_utf8(std::string_view s);
std::string to_valid_utf8(std::string_view s);

}  // namespace zt::io::unicode
