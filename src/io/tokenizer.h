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
  virtual int32_t unk_id() const { return -1; }  // -1 when none
  // The ids encode(text, SpecialTokens::Add) puts before and after the text's own.
  virtual std::vector<int32_t> added_prefix() const { return {}; }
  virtual std::vector<int32_t> added_suffix() const { return {}; }
  // The files it was read from (tokenizer.json; vocab.json, merges.txt; a .model), and
  // the transformers class that reads them the same way ("PreTrainedTokenizerFast",
  // "GPT2Tokenizer", "LlamaTokenizer"; "" for the byte tokenizer, which has no HF form).
  virtual std::vector<std::string> files() const { return {}; }
  virtual std::string hf_class() const { return ""; }
};

// `path` is a tokenizer.json, a .model file, a vocab.json (merges.txt beside it), or a
// directory holding one of these, picked in the order transformers' AutoTokenizer does
// (tokenizer.json; one whose vocabulary is empty, as transformers 5 saves a slow GPT-2
// tokenizer, gives way to the vocab.json + merges.txt beside it; vocab.json;
// tokenizer.model). A tokenizer_config.json beside the file is followed (see
// io/tokenizer_config.h). Throws BadInput naming the file and what is wrong; an empty
// vocabulary is an error, never a tokenizer that encodes every text to nothing.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// The byte tokenizer (id = byte) of the built-in run without a trained vocabulary.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

}  // namespace zt::io
