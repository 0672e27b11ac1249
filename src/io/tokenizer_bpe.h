// A HF-tokenizers pipeline around the BPE model: added tokens (matched before
// pre-tokenization, longest first), pre-tokenizer, BPE, post-processor (BOS/EOS
// templates), decoder. Built from tokenizer.json or GPT-2's vocab.json + merges.txt.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/bpe.h"
#include "io/pretokenize.h"
#include "io/tokenizer.h"

namespace zt::io {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;
};

enum class DecoderKind {
  None,           // tokens joined with spaces (HF without a decoder)
  ByteLevel,      // byte map back to bytes, then lossy UTF-8
  SentencePiece,  // Replace '▁' -> ' ', ByteFallback, Fuse, Strip(' ', 1, 0) as Llama-2's
};

struct BpeSpec {
  std::string where;  // file name for errors
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  BpeOptions options;
  std::vector<AddedToken> added;
  std::vector<PreTokenizerStep> pre_tokenizer;
  // Normalizer limited to what SentencePiece-converted files use: prepend + replace.
  std::string normalizer_prepend;
  std::vector<std::pair<std::string, std::string>> normalizer_replace;
  DecoderKind decoder = DecoderKind::ByteLevel;
  std::vector<int32_t> post_prefix, post_suffix;  // special token ids around one sequence
  std::string bos_token, eos_token;               // "" when unknown
  // tokenizer_config.json's add_bos_token / add_eos_token: when set, they replace the
  // post-processor's ids with [bos] / [eos] (as transformers' TokenizersBackend does).
  std::optional<bool> add_bos, add_eos;
  std::string hf_class;            // Tokenizer::hf_class
  std::vector<std::string> files;  // Tokenizer::files
};

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeSpec spec);

}  // namespace zt::io
