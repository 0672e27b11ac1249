#include "io/bpe_trainer.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "io/bpe.h"
#include "io/pretokenize.h"
#include "io/tokenizer_load.h"
#include "io/unicode.h"

namespace zt::io {
namespace {

using Pair = uint64_t;  // (left id << 32) | right id
inline Pair make_pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
inline int32_t left_of(Pair p) { return static_cast<int32_t>(p >> 32); }
inline int32_t right_of(Pair p) { return static_cast<int32_t>(p & 0xFFFFFFFFu); }

struct Candidate {
  int64_t count;
  Pair pair;
  // Max-heap: most frequent first; ties: the smaller pair of ids (HF's trainer order).
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

// Merges (a, b) -> id in one word, left to right; reports the pair count changes.
void merge_word(std::vector<int32_t>& w, int32_t a, int32_t b, int32_t id, std::vector<std::pair<Pair, int>>& changes) {
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    if (w[i] != a || w[i + 1] != b) continue;
    if (i > 0) {
      changes.emplace_back(make_pair_key(w[i - 1], a), -1);
      changes.emplace_back(make_pair_key(w[i - 1], id), +1);
    }
    w[i] = id;
    w.erase(w.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    if (i + 1 < w.size()) {
      changes.emplace_back(make_pair_key(b, w[i + 1]), -1);
      changes.emplace_back(make_pair_key(id, w[i + 1]), +1);
    }
  }
}

// Words (GPT-2 pre-tokens, raw bytes) and their counts.
std::unordered_map<std::string, int64_t> count_words(const std::vector<std::string>& texts) {
  std::unordered_map<std::string, int64_t> word_counts;
  for (const std::string& raw : texts) {
    const std::string text = unicode::to_valid_utf8(raw);
    for (size_t i = 0; i < text.size();) {
      const size_t e = match_known_regex(KnownRegex::Gpt2, text, i);
      ++word_counts[text.substr(i, e - i)];
      i = e;
    }
  }
  return word_counts;
}

struct Vocabulary {
  std::vector<std::string> tokens;  // byte-level spelling
  std::unordered_map<std::string, int32_t> ids;
  std::array<int32_t, 256> byte_id{};

  // The id of `token`, appended when it is new.
  int32_t add(const std::string& token) {
    if (auto it = ids.find(token); it != ids.end()) return it->second;
    const auto id = static_cast<int32_t>(tokens.size());
    ids[token] = id;
    tokens.push_back(token);
    return id;
  }
};

// Specials, then the 256 byte characters in code point order (as HF's trainer sorts its
// alphabet); the merges add one token each after them.
Vocabulary initial_vocabulary(const std::vector<std::string>& special_tokens) {
  Vocabulary v;
  for (const std::string& s : special_tokens) {
    if (v.ids.count(s)) ZT_THROW_INPUT("special token '", s, "' given twice");
    v.ids[s] = static_cast<int32_t>(v.tokens.size());
    v.tokens.push_back(s);
  }
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = b;
  std::sort(bytes.begin(), bytes.end(), [](int x, int y) {
    return byte_to_code_point()[static_cast<size_t>(x)] < byte_to_code_point()[static_cast<size_t>(y)];
  });
  for (int b : bytes) {
    const std::string s = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
    v.byte_id[static_cast<size_t>(b)] = static_cast<int32_t>(v.tokens.size());
    v.ids[s] = static_cast<int32_t>(v.tokens.size());
    v.tokens.push_back(s);
  }
  return v;
}

// The words as symbol ids, each pair's count over all words and the words holding it, and
// the candidates by count.
struct PairState {
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  std::unordered_map<Pair, int64_t> pair_counts;
  std::unordered_map<Pair, std::unordered_set<int>> where;
  std::priority_queue<Candidate> heap;
};

PairState initial_pairs(const std::unordered_map<std::string, int64_t>& word_counts,
                        const std::array<int32_t, 256>& byte_id) {
  PairState st;
  st.words.reserve(word_counts.size());
  for (const auto& [w, c] : word_counts) {
    std::vector<int32_t> syms;
    for (unsigned char b : w) syms.push_back(byte_id[b]);
    st.words.push_back(std::move(syms));
    st.counts.push_back(c);
  }
  for (size_t wi = 0; wi < st.words.size(); ++wi) {
    const auto& w = st.words[wi];
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      const Pair p = make_pair_key(w[i], w[i + 1]);
      st.pair_counts[p] += st.counts[wi];
      st.where[p].insert(static_cast<int>(wi));
    }
  }
  for (const auto& [p, c] : st.pair_counts)
    if (c > 0) st.heap.push({c, p});
  return st;
}

// Replaces `pair` by `id` in every word holding it, updating the counts, and queues the
// pairs the merge created with their new counts.
void apply_merge(PairState& st, Pair pair, int32_t id) {
  const int32_t a = left_of(pair), b = right_of(pair);
  st.pair_counts[pair] = 0;  // merged everywhere
  std::unordered_map<Pair, std::unordered_set<int>> touched;
  std::vector<std::pair<Pair, int>> changes;
  std::vector<int> positions(st.where[pair].begin(), st.where[pair].end());
  std::sort(positions.begin(), positions.end());
  st.where.erase(pair);
  for (int wi : positions) {
    changes.clear();
    merge_word(st.words[static_cast<size_t>(wi)], a, b, id, changes);
    for (const auto& [p, delta] : changes) {
      st.pair_counts[p] += delta * st.counts[static_cast<size_t>(wi)];
      if (delta > 0) {
        touched[p].insert(wi);
        st.where[p].insert(wi);
      }
    }
  }
  for (const auto& [p, ws] : touched) {
    (void)ws;
    const int64_t c = st.pair_counts[p];
    if (c > 0) st.heap.push({c, p});
  }
}

// Merges the most frequent pair until the vocabulary is full or no pair is frequent
// enough; returns the merges in order.
std::vector<std::pair<int32_t, int32_t>> learn_merges(PairState& st, Vocabulary& vocab,
                                                      const BpeTrainOptions& options) {
  std::vector<std::pair<int32_t, int32_t>> merges;
  while (static_cast<int64_t>(vocab.tokens.size()) < options.vocab_size && !st.heap.empty()) {
    Candidate top = st.heap.top();
    st.heap.pop();
    const int64_t current = st.pair_counts[top.pair];
    if (top.count != current) {  // stale: requeue with the current count
      if (current > 0) st.heap.push({current, top.pair});
      continue;
    }
    if (top.count < 1 || top.count < options.min_frequency) break;
    const int32_t a = left_of(top.pair), b = right_of(top.pair);
    const int32_t id = vocab.add(vocab.tokens[static_cast<size_t>(a)] + vocab.tokens[static_cast<size_t>(b)]);
    merges.emplace_back(a, b);
    apply_merge(st, top.pair, id);
  }
  return merges;
}

// HF tokenizers' tokenizer.json of a byte-level BPE with these tokens and merges.
std::string tokenizer_json(const Vocabulary& vocab, const std::vector<std::pair<int32_t, int32_t>>& merges,
                           const std::vector<std::string>& special_tokens) {
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::ordered_json::array();
  for (const std::string& s : special_tokens) {
    nlohmann::ordered_json t;
    t["id"] = vocab.ids.at(s);
    t["content"] = s;
    t["single_word"] = false;
    t["lstrip"] = false;
    t["rstrip"] = false;
    t["normalized"] = false;
    t["special"] = true;
    j["added_tokens"].push_back(t);
  }
  j["normalizer"] = nullptr;
  auto byte_level = [](bool prefix, bool trim) {
    nlohmann::ordered_json o;
    o["type"] = "ByteLevel";
    o["add_prefix_space"] = prefix;
    o["trim_offsets"] = trim;
    o["use_regex"] = true;
    return o;
  };
  j["pre_tokenizer"] = byte_level(false, true);
  j["post_processor"] = byte_level(true, false);
  j["decoder"] = byte_level(true, true);
  nlohmann::ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  for (size_t i = 0; i < vocab.tokens.size(); ++i) v[vocab.tokens[i]] = static_cast<int32_t>(i);
  model["vocab"] = std::move(v);
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges)
    m.push_back({vocab.tokens[static_cast<size_t>(a)], vocab.tokens[static_cast<size_t>(b)]});
  model["merges"] = std::move(m);
  j["model"] = std::move(model);
  return j.dump(2) + "\n";
}

}  // namespace

std::string train_bpe_tokenizer_json(const std::vector<std::string>& texts, const BpeTrainOptions& options) {
  const int64_t n_special = static_cast<int64_t>(options.special_tokens.size());
  if (options.vocab_size < 256 + n_special)
    ZT_THROW_INPUT("--vocab-size ", options.vocab_size, " is too small: the 256 bytes and ", n_special,
                   " special token(s) need ", 256 + n_special);
  if (options.vocab_size > INT32_MAX) ZT_THROW_INPUT("--vocab-size ", options.vocab_size, " is too large");
  const std::unordered_map<std::string, int64_t> word_counts = count_words(texts);
  Vocabulary vocab = initial_vocabulary(options.special_tokens);
  PairState pairs = initial_pairs(word_counts, vocab.byte_id);
  const std::vector<std::pair<int32_t, int32_t>> merges = learn_merges(pairs, vocab, options);
  return tokenizer_json(vocab, merges, options.special_tokens);
}

std::unique_ptr<Tokenizer> train_bpe_tokenizer(const std::vector<std::string>& texts, const BpeTrainOptions& options) {
  BpeSpec spec = parse_tokenizer_json(train_bpe_tokenizer_json(texts, options), "<trained tokenizer>");
  if (!options.special_tokens.empty()) spec.bos_token = spec.eos_token = options.special_tokens.front();
  return make_bpe_tokenizer(std::move(spec));
}

}  // namespace zt::io
