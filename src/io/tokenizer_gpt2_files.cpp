// GPT-2's classic pair: vocab.json ({token: id}) + merges.txt ("#version: 0.2", then
// one "a b" merge per line), read as HF's GPT2TokenizerFast does: ByteLevel
// pre-tokenizer without prefix space, ByteLevel decoder, <|endoftext|> special.
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/bounded_file.h"
#include "io/byte_tokenizer.h"
#include "io/tokenizer_load.h"

namespace zt::io {

BpeSpec parse_gpt2_files(const std::string& vocab_path, const std::string& merges_path) {
  BpeSpec spec;
  spec.where = vocab_path;
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_bounded_file(vocab_path, "tokenizer file", kTokenizerFileCap));
  } catch (const nlohmann::json::exception& e) {
    ZT_THROW_INPUT(vocab_path, ": not valid JSON (", e.what(), "); expected GPT-2's vocab.json {token: id}");
  }
  if (!vocab.is_object()) ZT_THROW_INPUT(vocab_path, ": expected a JSON object {token: id}, got ", vocab.type_name());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto& v = it.value();
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      ZT_THROW_INPUT(vocab_path, ": token '", it.key(), "' has id ", v.dump(), "; ids must be non-negative integers");
    spec.vocab.emplace_back(it.key(), static_cast<int32_t>(v.get<int64_t>()));
  }
  std::istringstream merges(read_bounded_file(merges_path, "tokenizer file", kTokenizerFileCap));
  std::string line;
  for (size_t lineno = 1; std::getline(merges, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size() || line.find(' ', sp + 1) != std::string::npos)
      ZT_THROW_INPUT(merges_path, ":", lineno, ": '", line, "' is not two tokens separated by one space");
    spec.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  spec.where = vocab_path + " + " + merges_path;
  PreTokenizerStep byte_level;
  byte_level.kind = PreTokenizerStep::Kind::ByteLevel;
  spec.pre_tokenizer.push_back(byte_level);
  spec.decoder = DecoderKind::ByteLevel;
  spec.options.alphabet = Alphabet::Bytes;
  for (const auto& [tok, id] : spec.vocab) {
    if (tok == "<|endoftext|>") {
      AddedToken t;
      t.id = id;
      t.content = tok;
      t.special = true;
      spec.added.push_back(t);
      spec.bos_token = spec.eos_token = tok;
      spec.options.unk_token = tok;  // GPT2Tokenizer's unk too (never used: every byte is a token)
    }
  }
  return spec;
}

}  // namespace zt::io
