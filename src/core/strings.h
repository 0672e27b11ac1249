// Small string helpers used across the tree: one definition each, so that every place that
// tests a suffix, lowercases a name or suggests "did you mean" behaves the same way.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

// Whether `s` begins with `prefix` (an empty prefix: always; a prefix longer than `s`: never).
inline bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Whether `s` ends with `suffix` (an empty suffix: always; a suffix longer than `s`: never).
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `s` with ASCII letters lowercased (config values, GPU names: bytes past 0x7f stay as they are).
std::string lower(std::string s);

// The items in order with `separator` between them ("" for none).
std::string join(const std::vector<std::string>& items, std::string_view separator);

// Whether letters that differ only in ASCII case count as equal.
enum class Case { Sensitive, Insensitive };

// The Levenshtein distance: the fewest single-character insertions, deletions and
// substitutions that turn `a` into `b` (the other's length when one is empty).
size_t edit_distance(std::string_view a, std::string_view b, Case letter_case = Case::Sensitive);

// The candidate nearest to `word` by edit_distance, if at most `max_distance` away, else "";
// on a tie, the first in order. What "did you mean" suggestions are made from.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates, size_t max_distance,
                          Case letter_case = Case::Sensitive);

}  // namespace zt
