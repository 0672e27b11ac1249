// The BPE model of HF tokenizers: vocabulary, ranked merges, and the merge loop (lowest
// rank first, leftmost on ties, as tokenizers' Word::merge_all), with a word cache.
//
// Byte-level vocabularies (GPT-2, Llama-3, Qwen2) spell bytes as printable code points
// (space -> "Ġ"); the model converts them back to raw bytes once at load, so encoding
// works on the raw bytes of each pre-token. Char-level vocabularies keep their tokens
// and split words into UTF-8 characters (with `<0xXX>` byte fallback).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zt::io {

// GPT-2's byte <-> code point map: bytes 33-126, 161-172, 174-255 map to themselves,
// the other 68 to 256 + k in order.
const std::array<uint32_t, 256>& byte_to_code_point();
// -1 when `cp` is not the image of a byte.
int code_point_to_byte(uint32_t cp);
// A token of a byte-level vocabulary in raw bytes; nullopt when some character is not
// in the byte map (then HF's ByteLevel decoder keeps the token's UTF-8 as is).
std::optional<std::string> byte_level_to_bytes(std::string_view token);
std::string bytes_to_byte_level(std::string_view bytes);

enum class Alphabet { Bytes, Chars };
enum class IgnoreMerges { No, Yes };
enum class ByteFallback { No, Yes };

struct BpeOptions {
  Alphabet alphabet = Alphabet::Bytes;
  IgnoreMerges ignore_merges = IgnoreMerges::No;
  ByteFallback byte_fallback = ByteFallback::No;
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
};

class BpeModel {
 public:
  // `vocab` and `merges` as spelled in the file. `where` names the file for errors
  // (BadInput for merges of unknown tokens, duplicate ids).
  BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& where);
  ~BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one pre-token (raw bytes for Alphabet::Bytes, text for Chars).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }  // max id + 1
  bool has_id(int32_t id) const;
  const std::string& token(int32_t id) const { return id_to_token_[static_cast<size_t>(id)]; }
  std::optional<int32_t> find(const std::string& token) const;  // as spelled in the file
  const BpeOptions& options() const { return options_; }

 private:
  struct PairMap;
  struct Cache;
  void merge(std::vector<int32_t>& symbols) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& out) const;

  BpeOptions options_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> present_;
  std::unordered_map<std::string, int32_t> file_vocab_;  // as spelled in the file
  std::unordered_map<std::string, int32_t> word_vocab_;  // raw bytes (Bytes) or text (Chars)
  std::array<int32_t, 256> byte_ids_{};                  // Bytes: id of each single byte, or -1
  std::array<int32_t, 256> fallback_ids_{};              // Chars: id of <0xXX>, or -1
  std::optional<int32_t> unk_id_;
  std::unique_ptr<PairMap> pairs_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace zt::io
