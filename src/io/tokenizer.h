// Tokenizers: byte-level BPE (HF tokenizer.json, GPT-2 vocab.json + merges.txt) and
// SentencePiece (.model). Encode/decode match HF tokenizers / sentencepiece exactly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zt::io {

enum class SpecialTokens { Skip, Add };  // Add: BOS/EOS as the post-processor does

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text, SpecialTokens specials = SpecialTokens::Skip) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int64_t vocab_size() const = 0;  // including added tokens
  virtual int32_t bos_id() const = 0;      // -1 when none
  virtual int32_t eos_id() const = 0;      // -1 when none
  virtual std::string token(int32_t id) const = 0;
  virtual std::string kind() const = 0;  // "bpe", "sentencepiece", "bytes"
};

// `path` is a tokenizer.json, a .model file, a vocab.json (merges.txt beside it), or a
// directory holding one of these (tokenizer.json preferred). Throws BadInput naming
// the file and what is wrong.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// The byte tokenizer (id = byte) of the built-in run without a trained vocabulary.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

}  // namespace zt::io
