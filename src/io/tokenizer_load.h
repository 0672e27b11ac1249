// Internal: the loaders behind load_tokenizer (one per file format).
#pragma once
#include <memory>
#include <string>

#include "io/tokenizer.h"
#include "io/tokenizer_bpe.h"
#include "io/tokenizer_config.h"

namespace zt::io {

// tokenizer.json text -> spec; `path` names the file in errors.
BpeSpec parse_tokenizer_json(const std::string& text, const std::string& path);
// GPT-2's vocab.json + merges.txt.
BpeSpec parse_gpt2_files(const std::string& vocab_path, const std::string& merges_path);
// SentencePiece .model (Unsupported when built without libsentencepiece), with the
// tokenizer_config.json beside it: BOS added unless add_bos_token is false, EOS only when
// add_eos_token is true (HF's LlamaTokenizer defaults).
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path, const TokenizerConfig& config);

}  // namespace zt::io
