#include "io/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace zt::io::unicode {
namespace {

// The Basic Multilingual Plane as a flat table (64 KiB, built once) because the
// pre-tokenizers classify every character; the rest by binary search.
const std::vector<CodePointClass>& bmp_table() {
  static const std::vector<CodePointClass> table = [] {
    std::vector<CodePointClass> t(0x10000, CodePointClass::Other);
    for (size_t r = 0; r < kNumCodePointRanges; ++r) {
      const CodePointRange& range = kCodePointRanges[r];
      for (uint32_t cp = range.first; cp <= range.last && cp < 0x10000; ++cp) t[cp] = range.cls;
    }
    return t;
  }();
  return table;
}

// Length of the valid prefix of a sequence starting at s[i] (Unicode's "maximal subpart"):
// returns the sequence length when complete, or -k for an invalid subpart of k bytes.
int sequence_length(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < need; ++k) {
    if (i + k >= s.size()) return -k;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return -k;
  }
  return need;
}

}  // namespace

CodePointClass classify(uint32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  const CodePointRange* begin = kCodePointRanges;
  const CodePointRange* end = kCodePointRanges + kNumCodePointRanges;
  const CodePointRange* it =
      std::upper_bound(begin, end, cp, [](uint32_t c, const CodePointRange& r) { return c < r.first; });
  if (it == begin) return CodePointClass::Other;
  --it;
  return cp <= it->last ? it->cls : CodePointClass::Other;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = sequence_length(s, i);
    if (n < 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size();) {
    const int n = sequence_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += static_cast<size_t>(-n);
    }
  }
  return out;
}

}  // namespace zt::io::unicode
