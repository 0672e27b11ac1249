// Byte-level BPE training (what HF's ByteLevelBPETokenizer.train does): GPT-2
// pre-tokenization, word counts, then repeatedly merge the most frequent adjacent pair
// (ties: the smallest pair of token strings, as HF's trainer) until the vocabulary is full.
// The result is a tokenizer.json that PyPI tokenizers loads and encodes identically.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/tokenizer.h"

namespace zt::io {

struct BpeTrainOptions {
  int64_t vocab_size = 512;   // including the 256 bytes and the special tokens
  int64_t min_frequency = 2;  // pairs seen fewer times are not merged
  std::vector<std::string> special_tokens{"<|endoftext|>"};
};

// Trains on `texts` (documents) and returns the tokenizer.json text.
std::string train_bpe_tokenizer_json(const std::vector<std::string>& texts, const BpeTrainOptions& options);

// Trains and loads the result (for the built-in run).
std::unique_ptr<Tokenizer> train_bpe_tokenizer(const std::vector<std::string>& texts, const BpeTrainOptions& options);

}  // namespace zt::io
