// The tokenizer files of a HF model directory, as transformers' save_pretrained leaves
// them: the files the tokenizer is read from under their standard names (tokenizer.json;
// vocab.json + merges.txt; tokenizer.model), and tokenizer_config.json +
// special_tokens_map.json. A source that has its own tokenizer_config.json (and
// special_tokens_map.json, chat_template.jinja, added_tokens.json) has them carried over
// byte for byte; one without gets them written (io/tokenizer_config.h), so that
// AutoTokenizer encodes as zerotrain does.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zt::model {

struct TokenizerFiles {
  std::vector<std::pair<std::string, std::string>> copies;   // {source file, name in the model directory}
  std::vector<std::pair<std::string, std::string>> written;  // {name in the model directory, contents}
};

// `source`: a tokenizer file (tokenizer.json or another name, vocab.json, a .model) or a
// directory holding one. The tokenizer is loaded (so a broken one fails before anything
// is written). model_max_length: the model's context, for a written tokenizer_config.json.
TokenizerFiles tokenizer_files_for(const std::string& source, int64_t model_max_length);

// The file names that belong to a saved tokenizer (a new save replaces all of them).
bool is_tokenizer_file_name(const std::string& name);

}  // namespace zt::model
