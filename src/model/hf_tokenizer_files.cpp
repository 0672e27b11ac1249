#include "model/hf_tokenizer_files.h"
#include "core/strings.h"

#include <filesystem>

#include "core/error.h"
#include "io/tokenizer.h"
#include "io/tokenizer_config.h"

namespace zt::model {
namespace fs = std::filesystem;

namespace {

// The files a tokenizer is read from, under the names HF looks for.
const char* const kModelFiles[] = {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model"};
// What save_pretrained writes beside them; carried over from the source as they are.
const char* const kConfigFiles[] = {"tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                                    "chat_template.jinja", "chat_template.json"};

std::string standard_name(const fs::path& file) {
  const std::string name = file.filename().string();
  if (name == "vocab.json" || name == "merges.txt") return name;
  if (ends_with(name, ".model")) return "tokenizer.model";
  if (ends_with(name, ".json")) return "tokenizer.json";
  return name;
}

}  // namespace

bool is_tokenizer_file_name(const std::string& name) {
  for (const char* t : kModelFiles)
    if (name == t) return true;
  for (const char* t : kConfigFiles)
    if (name == t) return true;
  return false;
}

TokenizerFiles tokenizer_files_for(const std::string& source, int64_t model_max_length) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(source, ec);
  if (!is_dir && !fs::is_regular_file(source, ec)) ZT_THROW_INPUT(source, ": tokenizer file or directory not found");
  TokenizerFiles out;
  // One of the files beside a tokenizer (a tokenizer_config.json, a chat template) given
  // on its own: copied as it is.
  for (const char* name : kConfigFiles)
    if (!is_dir && fs::path(source).filename() == name) {
      out.copies.emplace_back(source, name);
      return out;
    }
  const std::unique_ptr<io::Tokenizer> tok = io::load_tokenizer(source);
  const fs::path dir = is_dir ? fs::path(source) : fs::path(source).parent_path();

  auto has = [&](const std::string& name) {
    for (const auto& [src, dst] : out.copies)
      if (dst == name) return true;
    return false;
  };
  for (const std::string& f : tok->files()) out.copies.emplace_back(f, standard_name(f));
  // A directory is the tokenizer HF saved: its other files too (a tokenizer.model beside
  // the tokenizer.json, the empty tokenizer.json transformers 5 writes beside vocab.json).
  if (is_dir)
    for (const char* name : kModelFiles)
      if (!has(name) && fs::is_regular_file(dir / name, ec)) out.copies.emplace_back((dir / name).string(), name);
  for (const char* name : kConfigFiles)
    if (fs::is_regular_file(dir / name, ec)) out.copies.emplace_back((dir / name).string(), name);
  if (!has("tokenizer_config.json")) {
    const io::HfTokenizerConfigFiles hf = io::make_hf_tokenizer_config(*tok, model_max_length);
    out.written.emplace_back("tokenizer_config.json", hf.tokenizer_config);
    if (!has("special_tokens_map.json")) out.written.emplace_back("special_tokens_map.json", hf.special_tokens_map);
  }
  return out;
}

}  // namespace zt::model
