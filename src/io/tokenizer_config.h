// tokenizer_config.json: read (the keys zerotrain follows, as transformers resolves a
// tokenizer) and written (for a tokenizer that came without one, so that AutoTokenizer
// reproduces zerotrain's token ids).
//
// Read: bos_token / eos_token / unk_token (a string or an AddedToken {"content": ...}),
// add_bos_token / add_eos_token (replace the post-processor with [bos] A [eos], as
// transformers' TokenizersBackend does when the keys are present), add_prefix_space
// (GPT-2's vocab.json + merges.txt), tokenizer_class (reported; the files are picked in
// HF's order). chat_template and the rest are carried over with the file, not used.
//
// Written: tokenizer_class PreTrainedTokenizerFast for a tokenizer.json (transformers 5
// then loads the file as it is instead of rebuilding a model-specific pipeline around its
// vocabulary), GPT2Tokenizer for vocab.json + merges.txt, LlamaTokenizer for a
// SentencePiece .model; every special token named only when it is in the vocabulary (a
// named token that is not gets a new id past the vocabulary in HF), null otherwise.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "io/tokenizer.h"

namespace zt::io {

struct TokenizerConfig {
  std::string path;  // the file read; "" when the directory has none
  std::string tokenizer_class;
  std::optional<std::string> bos_token, eos_token, unk_token;
  std::optional<bool> add_bos_token, add_eos_token, add_prefix_space;
};

// dir/tokenizer_config.json, or an empty config (path "") when there is none. Invalid JSON
// and keys of the wrong type are BadInput naming the file and the key.
TokenizerConfig read_tokenizer_config(const std::string& dir);

struct HfTokenizerConfigFiles {
  std::string tokenizer_config;    // tokenizer_config.json text
  std::string special_tokens_map;  // special_tokens_map.json text
};

// The files transformers' save_pretrained writes beside `tok`'s files. model_max_length:
// the model's context. BadInput for the byte tokenizer (no HF form).
HfTokenizerConfigFiles make_hf_tokenizer_config(const Tokenizer& tok, int64_t model_max_length);

}  // namespace zt::io
