// load_tokenizer: picks the format from the path, and the byte tokenizer.
#include "io/tokenizer.h"
#include "core/strings.h"
#include "core/fs.h"

#include <sys/stat.h>

#include "core/error.h"
#include "core/log.h"
#include "io/bounded_file.h"
#include "io/byte_tokenizer.h"
#include "io/tokenizer_load.h"

namespace zt::io {
namespace {

std::string dir_of(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

// What a tokenizer_config.json beside the tokenizer says about its specials.
void apply_tokenizer_config(const TokenizerConfig& config, BpeSpec& spec) {
  if (config.bos_token) spec.bos_token = *config.bos_token;
  if (config.eos_token) spec.eos_token = *config.eos_token;
  spec.add_bos = config.add_bos_token;
  spec.add_eos = config.add_eos_token;
}

// Without a tokenizer_config.json: the usual end-of-text specials.
void default_specials(BpeSpec& spec) {
  if (!spec.eos_token.empty()) return;
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>"}) {
    for (const AddedToken& t : spec.added) {
      if (t.content == name) {
        spec.eos_token = name;
        if (spec.bos_token.empty() && std::string(name) == "<|endoftext|>") spec.bos_token = name;
        return;
      }
    }
  }
}

std::unique_ptr<Tokenizer> load_vocab(const std::string& vocab_path);

std::unique_ptr<Tokenizer> load_json(const std::string& path) {
  BpeSpec spec = parse_tokenizer_json(read_bounded_file(path, "tokenizer file", kTokenizerFileCap), path);
  if (spec.vocab.empty()) {
    // transformers 5 saves a slow GPT-2 tokenizer as a tokenizer.json whose model has no
    // vocabulary, beside the vocab.json + merges.txt that hold it (HF then loads those).
    const std::string vocab = dir_of(path) + "/vocab.json";
    if (is_file(vocab) && is_file(dir_of(path) + "/merges.txt")) {
      ZT_INFO(path, " has an empty vocabulary; using vocab.json + merges.txt beside it");
      return load_vocab(vocab);
    }
    ZT_THROW_INPUT(path,
                   ": the tokenizer's model has an empty vocabulary, so every text would encode to nothing; "
                   "give the tokenizer files that hold the vocabulary (vocab.json + merges.txt, tokenizer.model, "
                   "or a complete tokenizer.json)");
  }
  apply_tokenizer_config(read_tokenizer_config(dir_of(path)), spec);
  default_specials(spec);
  spec.hf_class = "PreTrainedTokenizerFast";
  spec.files = {path};
  return make_bpe_tokenizer(std::move(spec));
}

std::unique_ptr<Tokenizer> load_vocab(const std::string& vocab_path) {
  const std::string merges = dir_of(vocab_path) + "/merges.txt";
  if (!is_file(merges))
    ZT_THROW_INPUT(vocab_path, ": merges.txt not found beside it (", merges,
                   "); GPT-2 style tokenizers need both files");
  BpeSpec spec = parse_gpt2_files(vocab_path, merges);
  if (spec.vocab.empty())
    ZT_THROW_INPUT(vocab_path,
                   ": the vocabulary is empty, so every text would encode to nothing; give the "
                   "model's own vocab.json (or its tokenizer.json)");
  const TokenizerConfig config = read_tokenizer_config(dir_of(vocab_path));
  apply_tokenizer_config(config, spec);
  // GPT2Tokenizer's add_prefix_space: a space before the text, as the ByteLevel step adds.
  if (config.add_prefix_space)
    for (PreTokenizerStep& step : spec.pre_tokenizer)
      if (step.kind == PreTokenizerStep::Kind::ByteLevel)
        step.prefix_space = *config.add_prefix_space ? PrefixSpace::Yes : PrefixSpace::No;
  spec.hf_class = "GPT2Tokenizer";
  spec.files = {vocab_path, merges};
  return make_bpe_tokenizer(std::move(spec));
}

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text, SpecialTokens) const override { return byte_encode(text); }
  std::string decode(const std::vector<int32_t>& ids, bool) const override { return byte_decode(ids); }
  int64_t vocab_size() const override { return 256; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  std::string token(int32_t id) const override {
    return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
  }
  std::string kind() const override { return "bytes"; }
};

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (is_dir(path)) {
    for (const char* name : {"tokenizer.json", "vocab.json", "tokenizer.model"}) {
      const std::string p = path + "/" + name;
      if (is_file(p)) return load_tokenizer(p);
    }
    ZT_THROW_INPUT(path, ": no tokenizer.json, vocab.json (+ merges.txt) or tokenizer.model in this directory");
  }
  if (!is_file(path)) {
    struct stat st {};
    ZT_THROW_INPUT(path, ::stat(path.c_str(), &st) == 0
                             ? ": not a regular file (a device, FIFO or socket); a tokenizer is "
                               "a tokenizer.json / vocab.json / tokenizer.model file or a directory"
                             : ": no such tokenizer file or directory");
  }
  if (ends_with(path, ".model")) return load_sentencepiece(path, read_tokenizer_config(dir_of(path)));
  if (ends_with(path, "vocab.json")) return load_vocab(path);
  if (ends_with(path, ".json")) return load_json(path);
  ZT_THROW_INPUT(path,
                 ": unknown tokenizer file; pass a tokenizer.json, vocab.json (with merges.txt), "
                 "a SentencePiece .model, or a directory holding one");
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace zt::io
