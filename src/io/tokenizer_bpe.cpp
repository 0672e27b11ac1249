#include "io/tokenizer_bpe.h"

#include <algorithm>
#include <array>
#include <deque>
#include <unordered_map>

#include "core/error.h"
#include "io/unicode.h"

namespace zt::io {
namespace {

// Leftmost-longest matching of a set of added tokens (HF uses aho-corasick with
// MatchKind::LeftmostLongest); few tokens, so a first-byte index suffices.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { first_.fill(false); }
  void add(const AddedToken* t) {
    if (t->content.empty()) return;
    tokens_.push_back(t);
    first_[static_cast<unsigned char>(t->content[0])] = true;
    std::stable_sort(tokens_.begin(), tokens_.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  }
  bool empty() const { return tokens_.empty(); }
  // First match at or after `from`: (begin, token), or token == nullptr.
  std::pair<size_t, const AddedToken*> next(std::string_view s, size_t from) const {
    for (size_t i = from; i < s.size(); ++i) {
      if (!first_[static_cast<unsigned char>(s[i])]) continue;
      for (const AddedToken* t : tokens_)
        if (s.compare(i, t->content.size(), t->content) == 0) return {i, t};
    }
    return {s.size(), nullptr};
  }

 private:
  std::vector<const AddedToken*> tokens_;
  std::array<bool, 256> first_;
};

struct Segment {
  std::string_view text;  // when id < 0
  int32_t id = -1;
};

bool is_alnum(uint32_t cp) { return unicode::is_letter(cp) || unicode::is_number(cp); }

uint32_t last_code_point(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return unicode::decode_at(s, i, &len);
}

// HF AddedVocabulary::find_matches: splits `s` at the added tokens, honouring
// single_word, lstrip and rstrip.
void split_added(std::string_view s, const AddedTokenMatcher& m, std::vector<Segment>& out) {
  if (m.empty()) {
    out.push_back({s, -1});
    return;
  }
  size_t start_offset = 0, scan = 0;
  while (scan < s.size()) {
    auto [start, tok] = m.next(s, scan);
    if (!tok) break;
    size_t stop = start + tok->content.size();
    scan = stop;
    if (tok->single_word) {
      size_t len = 0;
      const bool start_space = start == 0 || !is_alnum(last_code_point(s.substr(0, start)));
      const bool stop_space = stop == s.size() || !is_alnum(unicode::decode_at(s, stop, &len));
      if (!start_space || !stop_space) continue;
    }
    if (start < start_offset) continue;  // inside a previous token's stripped space
    if (tok->lstrip) {
      size_t b = start;
      while (b > start_offset) {
        size_t p = b - 1;
        while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        size_t len = 0;
        if (!unicode::is_space(unicode::decode_at(s, p, &len))) break;
        b = p;
      }
      start = b;
    }
    if (tok->rstrip) {
      while (stop < s.size()) {
        size_t len = 0;
        if (!unicode::is_space(unicode::decode_at(s, stop, &len))) break;
        stop += len;
      }
    }
    if (start_offset < start) out.push_back({s.substr(start_offset, start - start_offset), -1});
    out.push_back({{}, tok->id});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({s.substr(start_offset), -1});
}

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec)
      : spec_(std::move(spec)),
        model_(spec_.vocab, spec_.merges, spec_.options, spec_.where),
        pre_(spec_.pre_tokenizer) {
    int64_t size = model_.size();
    for (const AddedToken& t : spec_.added) {
      if (t.id < 0) ZT_THROW_INPUT(spec_.where, ": added token '", t.content, "' has negative id ", t.id);
      size = std::max<int64_t>(size, int64_t{t.id} + 1);
    }
    vocab_size_ = size;
    added_by_id_.assign(static_cast<size_t>(size), nullptr);
    for (const AddedToken& t : spec_.added) {
      added_by_id_[static_cast<size_t>(t.id)] = &t;
      added_by_content_[t.content] = t.id;
      (t.normalized && has_normalizer() ? normalized_matcher_ : raw_matcher_).add(&t);
    }
    for (int32_t id : spec_.post_prefix) check_id(id, "post_processor");
    for (int32_t id : spec_.post_suffix) check_id(id, "post_processor");
    post_prefix_ = spec_.post_prefix;
    post_suffix_ = spec_.post_suffix;
    if (!spec_.bos_token.empty()) bos_ = lookup(spec_.bos_token).value_or(-1);
    if (!spec_.eos_token.empty()) eos_ = lookup(spec_.eos_token).value_or(-1);
    if (spec_.options.unk_token) unk_ = lookup(*spec_.options.unk_token).value_or(-1);
    apply_add_special(spec_.add_bos, "add_bos_token", "bos_token", spec_.bos_token, bos_, post_prefix_);
    apply_add_special(spec_.add_eos, "add_eos_token", "eos_token", spec_.eos_token, eos_, post_suffix_);
    decoded_.resize(static_cast<size_t>(size));
    for (int32_t id = 0; id < size; ++id) decoded_[static_cast<size_t>(id)] = decode_piece(token(id));
  }

  std::vector<int32_t> encode(const std::string& raw, SpecialTokens specials) const override {
    const std::string text = unicode::to_valid_utf8(raw);
    std::vector<int32_t> ids;
    if (specials == SpecialTokens::Add) ids = post_prefix_;
    ids.reserve(ids.size() + text.size() / 3 + 4);
    std::vector<Segment> raw_segments, segments;
    std::deque<std::string> storage;
    split_added(text, raw_matcher_, raw_segments);
    for (const Segment& seg : raw_segments) {
      if (seg.id >= 0 || !has_normalizer()) {
        segments.push_back(seg);
        continue;
      }
      storage.push_back(normalize(seg.text));
      split_added(storage.back(), normalized_matcher_, segments);
    }
    std::vector<std::string_view> pieces;
    for (const Segment& seg : segments) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      if (pre_.empty()) {
        model_.encode_word(seg.text, ids);
        continue;
      }
      pre_.run(seg.text, pieces, storage);
      for (std::string_view p : pieces) model_.encode_word(p, ids);
    }
    if (specials == SpecialTokens::Add) ids.insert(ids.end(), post_suffix_.begin(), post_suffix_.end());
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::vector<int32_t> kept;
    kept.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size_) continue;  // HF skips ids it does not know
      const AddedToken* t = added_by_id_[static_cast<size_t>(id)];
      if (!t && !model_.has_id(id)) continue;
      if (t && t->special && skip_special_tokens) continue;
      kept.push_back(id);
    }
    std::string out;
    switch (spec_.decoder) {
      case DecoderKind::None:
        for (size_t k = 0; k < kept.size(); ++k) {
          if (k) out.push_back(' ');
          out += token(kept[k]);
        }
        return out;
      case DecoderKind::ByteLevel:
        for (int32_t id : kept) out += decoded_[static_cast<size_t>(id)];
        return unicode::to_valid_utf8(out);
      case DecoderKind::SentencePiece:
        return decode_sentencepiece(kept);
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  std::string token(int32_t id) const override {
    if (id < 0 || id >= vocab_size_) return std::string();
    if (const AddedToken* t = added_by_id_[static_cast<size_t>(id)]) return t->content;
    return model_.has_id(id) ? model_.token(id) : std::string();
  }
  std::string kind() const override { return "bpe"; }
  int32_t unk_id() const override { return unk_; }
  std::vector<int32_t> added_prefix() const override { return post_prefix_; }
  std::vector<int32_t> added_suffix() const override { return post_suffix_; }
  std::vector<std::string> files() const override { return spec_.files; }
  std::string hf_class() const override { return spec_.hf_class; }

 private:
  bool has_normalizer() const { return !spec_.normalizer_prepend.empty() || !spec_.normalizer_replace.empty(); }
  std::string normalize(std::string_view s) const {
    std::string out(s);
    if (!spec_.normalizer_prepend.empty() && !out.empty()) out = spec_.normalizer_prepend + out;
    for (const auto& [from, to] : spec_.normalizer_replace) {
      if (from.empty()) continue;
      std::string r;
      size_t pos = 0;
      for (size_t f = out.find(from); f != std::string::npos; f = out.find(from, pos)) {
        r.append(out, pos, f - pos);
        r += to;
        pos = f + from.size();
      }
      r.append(out, pos, std::string::npos);
      out.swap(r);
    }
    return out;
  }
  std::optional<int32_t> lookup(const std::string& s) const {
    auto it = added_by_content_.find(s);
    if (it != added_by_content_.end()) return it->second;
    return model_.find(s);
  }
  // tokenizer_config.json's add_bos_token / add_eos_token: the post-processor becomes
  // [bos] A or A [eos] (or nothing), as transformers rebuilds it when the keys are given.
  void apply_add_special(std::optional<bool> add, const char* key, const char* token_key, const std::string& token,
                         int32_t id, std::vector<int32_t>& ids) const {
    if (!add) return;
    ids.clear();
    if (!*add) return;
    if (id < 0)
      ZT_THROW_INPUT(spec_.where, ": tokenizer_config.json sets ", key, " but its ", token_key, " '", token,
                     "' is not in the vocabulary; name a token of the vocabulary or set ", key, " to false");
    ids.push_back(id);
  }
  void check_id(int32_t id, const char* key) const {
    if (id < 0 || id >= vocab_size_ || (!added_by_id_[static_cast<size_t>(id)] && !model_.has_id(id)))
      ZT_THROW_INPUT(spec_.where, ": ", key, " uses token id ", id,
                     ", which is neither in the vocab nor an added token");
  }
  // What HF's ByteLevel decoder makes of one token.
  std::string decode_piece(const std::string& tok) const {
    if (spec_.decoder != DecoderKind::ByteLevel) return tok;
    auto raw = byte_level_to_bytes(tok);
    return raw ? *raw : tok;
  }
  std::string decode_sentencepiece(const std::vector<int32_t>& ids) const {
    static const std::string kSpace = "\xE2\x96\x81";  // U+2581
    std::string out, bytes;
    auto flush_bytes = [&] {
      if (bytes.empty()) return;
      if (unicode::is_valid_utf8(bytes)) {
        out += bytes;
      } else {
        for (size_t k = 0; k < bytes.size(); ++k) out += "\xEF\xBF\xBD";
      }
      bytes.clear();
    };
    for (int32_t id : ids) {
      const std::string t = token(id);
      unsigned int b = 0;
      char tail = 0;
      if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%2X%c", &b, &tail) == 2 && tail == '>') {
        bytes.push_back(static_cast<char>(b));
        continue;
      }
      flush_bytes();
      size_t pos = 0;
      for (size_t f = t.find(kSpace); f != std::string::npos; f = t.find(kSpace, pos)) {
        out.append(t, pos, f - pos);
        out.push_back(' ');
        pos = f + kSpace.size();
      }
      out.append(t, pos, std::string::npos);
    }
    flush_bytes();
    if (!out.empty() && out[0] == ' ') out.erase(0, 1);
    return out;
  }

  BpeSpec spec_;
  BpeModel model_;
  PreTokenizer pre_;
  int64_t vocab_size_ = 0;
  std::vector<const AddedToken*> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::vector<int32_t> post_prefix_, post_suffix_;
  std::vector<std::string> decoded_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeSpec spec) { return std::make_unique<BpeTokenizer>(std::move(spec)); }

}  // namespace zt::io
