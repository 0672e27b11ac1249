#include "io/pretokenize.h"

#include <algorithm>

#include "core/error.h"
#include "io/unicode.h"

namespace zt::io {

const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<KnownRegex> recognize_regex(const std::string& pattern) {
  if (pattern == kGpt2Regex) return KnownRegex::Gpt2;
  if (pattern == kLlama3Regex) return KnownRegex::Llama3;
  if (pattern == kQwen2Regex) return KnownRegex::Qwen2;
  return std::nullopt;
}

namespace {

using unicode::CodePointClass;

struct Char {
  uint32_t cp;
  size_t len;
  CodePointClass cls;
};

inline Char char_at(std::string_view s, size_t i) {
  Char c;
  c.cp = unicode::decode_at(s, i, &c.len);
  c.cls = unicode::classify(c.cp);
  return c;
}

// End of the run of characters of class `cls` starting at i.
size_t run_of(std::string_view s, size_t i, CodePointClass cls) {
  while (i < s.size()) {
    const Char c = char_at(s, i);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// `\s+(?!\S)|\s+` at i (a whitespace character): the run, less its last character when a
// non-space follows and the run has more than one character.
size_t match_space_run(std::string_view s, size_t i) {
  size_t last_start = i, j = i;
  while (j < s.size()) {
    const Char c = char_at(s, j);
    if (c.cls != CodePointClass::Space) break;
    last_start = j;
    j += c.len;
  }
  if (j == s.size() || last_start == i) return j;
  return last_start;
}

// 's 't 're 've 'm 'll 'd at i (s[i] == '\''); 0 when none. ASCII case folding only:
// Oniguruma's (?i:...) does not fold U+017F to 's' here (checked against tokenizers).
size_t match_contraction(std::string_view s, size_t i, bool ignore_case) {
  auto at = [&](size_t k) -> char {
    if (i + k >= s.size()) return 0;
    char c = s[i + k];
    if (ignore_case && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return c;
  };
  const char a = at(1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  const char b = at(2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

size_t match_gpt2(std::string_view s, size_t i) {
  const size_t n = s.size();
  if (s[i] == '\'') {
    if (size_t e = match_contraction(s, i, false)) return e;
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one class after an optional space.
  size_t p = i;
  if (s[i] == ' ' && i + 1 < n) p = i + 1;
  const Char c = char_at(s, p);
  if (c.cls != CodePointClass::Space) return run_of(s, p + c.len, c.cls);
  return match_space_run(s, i);
}

size_t match_llama3(std::string_view s, size_t i, int max_digits) {
  const size_t n = s.size();
  if (s[i] == '\'') {
    if (size_t e = match_contraction(s, i, true)) return e;
  }
  const Char c = char_at(s, i);
  // `[^\r\n\p{L}\p{N}]?\p{L}+`
  if (c.cls == CodePointClass::Letter) return run_of(s, i + c.len, CodePointClass::Letter);
  if (c.cp != '\r' && c.cp != '\n' && c.cls != CodePointClass::Number && i + c.len < n) {
    const Char next = char_at(s, i + c.len);
    if (next.cls == CodePointClass::Letter) return run_of(s, i + c.len + next.len, CodePointClass::Letter);
  }
  // `\p{N}{1,3}` (Llama-3) or `\p{N}` (Qwen2)
  if (c.cls == CodePointClass::Number) {
    size_t j = i + c.len;
    for (int k = 1; k < max_digits && j < n; ++k) {
      const Char d = char_at(s, j);
      if (d.cls != CodePointClass::Number) break;
      j += d.len;
    }
    return j;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t p = i;
  if (c.cp == ' ' && i + 1 < n) p = i + 1;
  const Char o = char_at(s, p);
  if (o.cls == CodePointClass::Other) {
    size_t j = run_of(s, p + o.len, CodePointClass::Other);
    while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
    return j;
  }
  // `\s*[\r\n]+`: up to the last line break of the whitespace run.
  size_t j = i, last_break = std::string_view::npos;
  while (j < n) {
    const Char w = char_at(s, j);
    if (w.cls != CodePointClass::Space) break;
    if (w.cp == '\r' || w.cp == '\n') last_break = j;
    j += w.len;
  }
  if (last_break != std::string_view::npos) return last_break + 1;
  return match_space_run(s, i);
}

class KnownRegexMatcher final : public Matcher {
 public:
  explicit KnownRegexMatcher(KnownRegex re) : re_(re) {}
  void find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const override {
    for (size_t i = 0; i < text.size();) {
      const size_t e = match_known_regex(re_, text, i);
      out.emplace_back(i, e);
      i = e;
    }
  }
  bool tiles() const override { return true; }

 private:
  KnownRegex re_;
};

class LiteralMatcher final : public Matcher {
 public:
  explicit LiteralMatcher(std::string literal) : literal_(std::move(literal)) {}
  void find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const override {
    if (literal_.empty()) return;
    for (size_t i = text.find(literal_); i != std::string_view::npos; i = text.find(literal_, i)) {
      out.emplace_back(i, i + literal_.size());
      i += literal_.size();
    }
  }

 private:
  std::string literal_;
};

// HF's SplitDelimiterBehavior over the matches (flag true) and the gaps between them.
void apply_behavior(std::string_view piece, const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, Invert invert, std::vector<std::string_view>& out) {
  struct Part {
    size_t b, e;
    bool is_match;
  };
  std::vector<Part> parts;
  size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) parts.push_back({pos, b, false});
    if (e > b) parts.push_back({b, e, true});
    pos = e;
  }
  if (pos < piece.size()) parts.push_back({pos, piece.size(), false});
  if (invert == Invert::Yes)
    for (Part& p : parts) p.is_match = !p.is_match;

  std::vector<Part> merged;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      merged = parts;
      break;
    case SplitBehavior::Removed:
      for (const Part& p : parts)
        if (!p.is_match) merged.push_back(p);
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !merged.empty())
          merged.back().e = p.e;
        else
          merged.push_back(p);
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.is_match && !previous_match && !merged.empty())
          merged.back().b = p.b;
        else
          merged.push_back(p);
        previous_match = p.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case SplitBehavior::Contiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !merged.empty())
          merged.back().e = p.e;
        else
          merged.push_back(p);
        previous_match = p.is_match;
      }
      break;
  }
  for (const Part& p : merged)
    if (p.e > p.b) out.push_back(piece.substr(p.b, p.e - p.b));
}

}  // namespace

size_t match_known_regex(KnownRegex re, std::string_view text, size_t i) {
  switch (re) {
    case KnownRegex::Gpt2:
      return match_gpt2(text, i);
    case KnownRegex::Llama3:
      return match_llama3(text, i, 3);
    case KnownRegex::Qwen2:
      return match_llama3(text, i, 1);
  }
  return text.size();
}

std::unique_ptr<Matcher> make_known_regex_matcher(KnownRegex re) { return std::make_unique<KnownRegexMatcher>(re); }
std::unique_ptr<Matcher> make_literal_matcher(std::string literal) {
  return std::make_unique<LiteralMatcher>(std::move(literal));
}

std::unique_ptr<Matcher> make_pcre2_matcher(const std::string& pattern, const std::string& where);

std::unique_ptr<Matcher> make_regex_matcher(const std::string& pattern, const std::string& where) {
  if (auto known = recognize_regex(pattern)) return make_known_regex_matcher(*known);
  return make_pcre2_matcher(pattern, where);
}

void PreTokenizer::run(std::string_view text, std::vector<std::string_view>& pieces,
                       std::deque<std::string>& storage) const {
  pieces.clear();
  if (!text.empty()) pieces.push_back(text);
  std::vector<std::string_view> next;
  std::vector<std::pair<size_t, size_t>> matches;
  static const KnownRegexMatcher gpt2(KnownRegex::Gpt2);
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) {
      const Matcher* m = step.matcher.get();
      SplitBehavior behavior = step.behavior;
      Invert invert = step.invert;
      if (step.kind == PreTokenizerStep::Kind::ByteLevel) {
        if (step.prefix_space == PrefixSpace::Yes && piece.front() != ' ') {
          storage.push_back(" " + std::string(piece));
          piece = storage.back();
        }
        if (step.use_regex == UseRegex::No) {
          next.push_back(piece);
          continue;
        }
        m = &gpt2;
        behavior = SplitBehavior::Isolated;
        invert = Invert::No;
      }
      matches.clear();
      m->find(piece, matches);
      if (m->tiles() && behavior == SplitBehavior::Isolated && invert == Invert::No) {
        for (const auto& [mb, me] : matches) next.push_back(piece.substr(mb, me - mb));
        continue;
      }
      apply_behavior(piece, matches, behavior, invert, next);
    }
    pieces.swap(next);
  }
}

}  // namespace zt::io
