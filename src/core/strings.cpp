#include "core/strings.h"

#include <algorithm>
#include <cctype>

namespace zt {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b, Case letter_case) {
  const auto differ = [letter_case](char x, char y) -> size_t {
    if (letter_case == Case::Insensitive)
      return std::tolower(static_cast<unsigned char>(x)) != std::tolower(static_cast<unsigned char>(y));
    return x != y;
  };
  // One row of the dynamic-programming table at a time: row[j] is the distance between
  // a's first i characters and b's first j.
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + differ(a[i - 1], b[j - 1])});
      prev = cur;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates, size_t max_distance,
                          Case letter_case) {
  std::string best;
  size_t best_d = max_distance + 1;
  for (const std::string& c : candidates)
    if (const size_t d = edit_distance(word, c, letter_case); d < best_d) {
      best_d = d;
      best = c;
    }
  return best;
}

}  // namespace zt
