#include "io/bpe.h"

#include <cstdio>
#include <functional>
#include <queue>

#include "core/error.h"
#include "io/unicode.h"

namespace zt::io {

const std::array<uint32_t, 256>& byte_to_code_point() {
  static const std::array<uint32_t, 256> map = [] {
    std::array<uint32_t, 256> m{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      m[b] = printable ? b : next++;
    }
    return m;
  }();
  return map;
}

int code_point_to_byte(uint32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv{};
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_to_code_point()[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  if (!unicode::is_valid_utf8(token)) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const int b = code_point_to_byte(unicode::decode_at(token, i, &len));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) unicode::append_utf8(out, byte_to_code_point()[b]);
  return out;
}

// (left id, right id) -> (rank, merged id): open addressing, because the merge loop
// looks up every adjacent pair.
struct BpeModel::PairMap {
  struct Slot {
    uint64_t key = ~uint64_t{0};
    int32_t rank = 0, id = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  static uint64_t key_of(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  explicit PairMap(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  // A repeated pair overwrites the earlier entry.
  void put(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t k = key_of(a, b);
    for (uint64_t h = hash(k) & mask;; h = (h + 1) & mask) {
      if (slots[h].key == k || slots[h].key == ~uint64_t{0}) {
        slots[h] = {k, rank, id};
        return;
      }
    }
  }
  const Slot* get(int32_t a, int32_t b) const {
    const uint64_t k = key_of(a, b);
    for (uint64_t h = hash(k) & mask;; h = (h + 1) & mask) {
      if (slots[h].key == k) return &slots[h];
      if (slots[h].key == ~uint64_t{0}) return nullptr;
    }
  }
};

// Word -> ids, sharded by hash so that encoding threads rarely wait on each other.
// Bounded like HF's cache: once a shard is full, new words are not added.
struct BpeModel::Cache {
  static constexpr size_t kShards = 64, kPerShard = 4096, kMaxWordBytes = 128;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  std::array<Shard, kShards> shards;
  Shard& shard_of(std::string_view w) { return shards[std::hash<std::string_view>()(w) % kShards]; }
};

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& where)
    : options_(std::move(options)), cache_(std::make_unique<Cache>()) {
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0) ZT_THROW_INPUT(where, ": vocab token '", token, "' has negative id ", id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  present_.assign(static_cast<size_t>(max_id + 1), false);
  byte_ids_.fill(-1);
  fallback_ids_.fill(-1);
  for (const auto& [token, id] : vocab) {
    if (present_[static_cast<size_t>(id)] && id_to_token_[static_cast<size_t>(id)] != token)
      ZT_THROW_INPUT(where, ": vocab id ", id, " is given to both '", id_to_token_[static_cast<size_t>(id)], "' and '",
                     token, "'; each id must name one token");
    id_to_token_[static_cast<size_t>(id)] = token;
    present_[static_cast<size_t>(id)] = true;
    file_vocab_[token] = id;
    if (options_.alphabet == Alphabet::Bytes) {
      if (auto raw = byte_level_to_bytes(token)) {
        word_vocab_.emplace(*raw, id);
        if (raw->size() == 1) byte_ids_[static_cast<unsigned char>((*raw)[0])] = id;
      }
    } else {
      word_vocab_.emplace(token, id);
      unsigned int b = 0;
      char tail = 0;
      if (token.size() == 6 && std::sscanf(token.c_str(), "<0x%2X%c", &b, &tail) == 2 && tail == '>')
        fallback_ids_[b & 0xFF] = id;
    }
  }
  if (options_.unk_token) {
    auto it = file_vocab_.find(*options_.unk_token);
    if (it == file_vocab_.end())
      ZT_THROW_INPUT(where, ": unk_token '", *options_.unk_token,
                     "' is not in the vocab; add it or set unk_token to null");
    unk_id_ = it->second;
  }
  pairs_ = std::make_unique<PairMap>(merges.size());
  // HF builds its merge map by iterating in order and inserting, so a repeated pair keeps
  // its LAST rank; we do the same (put overwrites).
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = file_vocab_.find(a), ib = file_vocab_.find(b), iab = file_vocab_.find(a + b);
    const std::string which = str(where, ": merge #", r, " ('", a, "' + '", b, "')");
    if (ia == file_vocab_.end())
      ZT_THROW_INPUT(which, " uses '", a, "', which is not in the vocab; the merges do not belong to this vocab");
    if (ib == file_vocab_.end())
      ZT_THROW_INPUT(which, " uses '", b, "', which is not in the vocab; the merges do not belong to this vocab");
    if (iab == file_vocab_.end())
      ZT_THROW_INPUT(which, " makes '", a + b, "', which is not in the vocab; the merges do not belong to this vocab");
    pairs_->put(ia->second, ib->second, static_cast<int32_t>(r), iab->second);
  }
}

BpeModel::~BpeModel() = default;

bool BpeModel::has_id(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < present_.size() && present_[static_cast<size_t>(id)];
}

std::optional<int32_t> BpeModel::find(const std::string& token) const {
  auto it = file_vocab_.find(token);
  if (it == file_vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& out) const {
  // A character without a token becomes unk (fused when fuse_unk) or, with no unk token,
  // is dropped: what HF's BPE does.
  auto push_unk = [&] {
    if (!unk_id_) return;
    if (options_.fuse_unk && !out.empty() && out.back() == *unk_id_) return;
    out.push_back(*unk_id_);
  };
  if (options_.alphabet == Alphabet::Bytes) {
    for (unsigned char b : word) {
      if (byte_ids_[b] >= 0)
        out.push_back(byte_ids_[b]);
      else
        push_unk();
    }
    return;
  }
  for (size_t i = 0; i < word.size();) {
    size_t len = 0;
    unicode::decode_at(word, i, &len);
    auto it = word_vocab_.find(std::string(word.substr(i, len)));
    if (it != word_vocab_.end()) {
      out.push_back(it->second);
    } else if (options_.byte_fallback == ByteFallback::Yes) {
      bool all = true;
      for (size_t k = 0; k < len; ++k) all = all && fallback_ids_[static_cast<unsigned char>(word[i + k])] >= 0;
      if (all) {
        for (size_t k = 0; k < len; ++k) out.push_back(fallback_ids_[static_cast<unsigned char>(word[i + k])]);
      } else {
        push_unk();
      }
    } else {
      push_unk();
    }
    i += len;
  }
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    syms[static_cast<size_t>(i)] = {ids[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1, true};
  struct Item {
    int32_t rank;
    int pos;
    int32_t id;
    bool operator>(const Item& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  auto push_pair = [&](int pos) {
    const int nx = syms[static_cast<size_t>(pos)].next;
    if (nx < 0) return;
    if (const PairMap::Slot* s = pairs_->get(syms[static_cast<size_t>(pos)].id, syms[static_cast<size_t>(nx)].id))
      heap.push({s->rank, pos, s->id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Item top = heap.top();
    heap.pop();
    Sym& left = syms[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Sym& right = syms[static_cast<size_t>(left.next)];
    // Stale entry: one side changed since it was queued.
    const PairMap::Slot* s = pairs_->get(left.id, right.id);
    if (!s || s->rank != top.rank || s->id != top.id) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  ids.clear();
  for (int i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) ids.push_back(syms[static_cast<size_t>(i)].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges == IgnoreMerges::Yes) {
    auto it = word_vocab_.find(std::string(word));
    if (it != word_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= Cache::kMaxWordBytes;
  if (cacheable) {
    Cache::Shard& shard = cache_->shard_of(word);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.map.find(std::string(word));
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  initial_symbols(word, ids);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    Cache::Shard& shard = cache_->shard_of(word);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.map.size() < Cache::kPerShard) shard.map.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace zt::io
