#include "io/tokenizer_config.h"
#include "core/fs.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_file.h"

namespace zt::io {
namespace {

using nlohmann::json;

// A special token: a string, an AddedToken {"content": ...}, or null (none).
std::optional<std::string> token_of(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  ZT_THROW_INPUT(path, ": key '", key, "' must be a token string or {\"content\": ...}, got ", it->dump());
}

std::optional<bool> bool_of(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) ZT_THROW_INPUT(path, ": key '", key, "' must be true or false, got ", it->dump());
  return it->get<bool>();
}

// The token for `id`, or null when the tokenizer has none.
json token_or_null(const Tokenizer& tok, int32_t id) {
  if (id < 0) return nullptr;
  const std::string t = tok.token(id);
  return t.empty() ? json(nullptr) : json(t);
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& dir) {
  TokenizerConfig c;
  const std::string path = dir + "/tokenizer_config.json";
  if (!is_file(path)) return c;
  json j;
  try {
    j = json::parse(read_bounded_file(path, "tokenizer file", kTokenizerFileCap));
  } catch (const json::exception& e) {
    ZT_THROW_INPUT(path, ": not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) ZT_THROW_INPUT(path, ": expected a JSON object, got ", j.type_name());
  c.path = path;
  if (auto it = j.find("tokenizer_class"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) ZT_THROW_INPUT(path, ": key 'tokenizer_class' must be a string, got ", it->dump());
    c.tokenizer_class = it->get<std::string>();
  }
  c.bos_token = token_of(j, "bos_token", path);
  c.eos_token = token_of(j, "eos_token", path);
  c.unk_token = token_of(j, "unk_token", path);
  c.add_bos_token = bool_of(j, "add_bos_token", path);
  c.add_eos_token = bool_of(j, "add_eos_token", path);
  c.add_prefix_space = bool_of(j, "add_prefix_space", path);
  return c;
}

HfTokenizerConfigFiles make_hf_tokenizer_config(const Tokenizer& tok, int64_t model_max_length) {
  const std::string cls = tok.hf_class();
  if (cls.empty())
    ZT_THROW_INPUT("the ", tok.kind(),
                   " tokenizer has no Hugging Face form; train with a tokenizer.json, vocab.json + merges.txt or "
                   "tokenizer.model");
  const json bos = token_or_null(tok, tok.bos_id()), eos = token_or_null(tok, tok.eos_id()),
             unk = token_or_null(tok, tok.unk_id());
  json c = {
      {"tokenizer_class", cls}, {"bos_token", bos}, {"eos_token", eos}, {"unk_token", unk}, {"pad_token", nullptr}};
  // add_bos_token / add_eos_token say what our encoder adds; a post-processor that adds
  // something else (a [CLS] ... [SEP] template) is left to the tokenizer.json it is in.
  const std::vector<int32_t> prefix = tok.added_prefix(), suffix = tok.added_suffix();
  const bool prefix_is_bos = prefix.empty() || (prefix.size() == 1 && prefix[0] == tok.bos_id());
  const bool suffix_is_eos = suffix.empty() || (suffix.size() == 1 && suffix[0] == tok.eos_id());
  if (prefix_is_bos && suffix_is_eos) {
    c["add_bos_token"] = !prefix.empty();
    c["add_eos_token"] = !suffix.empty();
  }
  if (cls == "GPT2Tokenizer") c["add_prefix_space"] = false;
  if (cls == "LlamaTokenizer") c["legacy"] = true;  // SentencePiece's own handling of text after specials
  c["model_max_length"] = model_max_length;
  c["clean_up_tokenization_spaces"] = false;

  json map = json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token"})
    if (!c[key].is_null()) map[key] = c[key];
  return {c.dump(2) + "\n", map.dump(2) + "\n"};
}

}  // namespace zt::io
