// Pre-tokenization as HF tokenizers does it: Split (regex or literal, with its behaviour
// and invert) and ByteLevel (prefix space, GPT-2 regex) steps applied to every piece.
// The GPT-2, Llama-3 and Qwen2 regexes are hand-coded matchers (no regex library needed,
// and faster); other regexes go to PCRE2 when zerotrain was built with it.
#pragma once
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zt::io {

// The hand-coded regexes. Llama3 and Qwen2 differ only in \p{N}{1,3} vs \p{N}.
enum class KnownRegex { Gpt2, Llama3, Qwen2 };
extern const char* const kGpt2Regex;
extern const char* const kLlama3Regex;
extern const char* const kQwen2Regex;
std::optional<KnownRegex> recognize_regex(const std::string& pattern);

// Byte end of the match of `re` starting at byte `i` of valid UTF-8 `text` (these regexes
// match at every position, so the matches tile the text).
size_t match_known_regex(KnownRegex re, std::string_view text, size_t i);

// Finds the non-overlapping, non-empty matches of a pattern, left to right.
class Matcher {
 public:
  virtual ~Matcher() = default;
  virtual void find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const = 0;
  // True when the matches always tile the text (enables a fast path).
  virtual bool tiles() const { return false; }
};
std::unique_ptr<Matcher> make_known_regex_matcher(KnownRegex re);
std::unique_ptr<Matcher> make_literal_matcher(std::string literal);
// `where` names the file/key for the error when the pattern cannot be used.
std::unique_ptr<Matcher> make_regex_matcher(const std::string& pattern, const std::string& where);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class Invert { No, Yes };
enum class PrefixSpace { No, Yes };
enum class UseRegex { No, Yes };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind = Kind::Split;
  std::shared_ptr<const Matcher> matcher;  // Split
  SplitBehavior behavior = SplitBehavior::Isolated;
  Invert invert = Invert::No;
  PrefixSpace prefix_space = PrefixSpace::No;  // ByteLevel
  UseRegex use_regex = UseRegex::Yes;          // ByteLevel: GPT-2 regex, Isolated
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}
  bool empty() const { return steps_.empty(); }
  // Cuts `text` into pieces (views into `text` or into strings kept in `storage`).
  void run(std::string_view text, std::vector<std::string_view>& pieces, std::deque<std::string>& storage) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace zt::io
