// SentencePiece .model files (Llama-2, Mistral) through libsentencepiece, optional at
// build time (ZT_WITH_SENTENCEPIECE).
#include "core/error.h"
#include "io/bounded_file.h"
#include "io/tokenizer_load.h"
#include "io/unicode.h"

#ifdef ZT_WITH_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace zt::io {

#ifdef ZT_WITH_SENTENCEPIECE
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const TokenizerConfig& config) : path_(path) {
    check_bounded_file(path, "tokenizer file", kTokenizerFileCap);
    const auto status = sp_.Load(path);
    if (!status.ok())
      ZT_THROW_INPUT(path, ": not a readable SentencePiece model (", status.ToString(),
                     "); pass the tokenizer.model file of the model");
    if (sp_.GetPieceSize() == 0)
      ZT_THROW_INPUT(path, ": the SentencePiece model has an empty vocabulary; pass the model's own tokenizer.model");
    // HF's LlamaTokenizer: add_bos_token true, add_eos_token false unless the config says.
    if (config.add_bos_token.value_or(true)) {
      if (sp_.bos_id() < 0)
        ZT_THROW_INPUT(path, ": ", config.path.empty() ? "BOS is added by default" : config.path + " sets add_bos_token",
                       " but the model has no BOS piece; set add_bos_token to false in tokenizer_config.json");
      prefix_.push_back(sp_.bos_id());
    }
    if (config.add_eos_token.value_or(false)) {
      if (sp_.eos_id() < 0)
        ZT_THROW_INPUT(config.path, ": add_eos_token is true but ", path, " has no EOS piece");
      suffix_.push_back(sp_.eos_id());
    }
  }
  std::vector<int32_t> encode(const std::string& text, SpecialTokens specials) const override {
    std::vector<int> ids;
    // Invalid UTF-8 becomes U+FFFD per maximal subpart first, as for the BPE tokenizers
    // (libsentencepiece's own replacement differs in count).
    const auto status = sp_.Encode(unicode::to_valid_utf8(text), &ids);
    if (!status.ok()) ZT_THROW_INPUT("sentencepiece encode failed: ", status.ToString());
    std::vector<int32_t> out;
    out.reserve(ids.size() + 2);
    if (specials == SpecialTokens::Add) out = prefix_;
    out.insert(out.end(), ids.begin(), ids.end());
    if (specials == SpecialTokens::Add) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::vector<int> kept;
    kept.reserve(ids.size());
    const int n = sp_.GetPieceSize();
    for (int32_t id : ids) {
      if (id < 0 || id >= n) continue;
      if (skip_special_tokens && (sp_.IsControl(id))) continue;
      kept.push_back(id);
    }
    std::string text;
    const auto status = sp_.Decode(kept, &text);
    if (!status.ok()) ZT_THROW_INPUT("sentencepiece decode failed: ", status.ToString());
    return text;
  }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  std::string token(int32_t id) const override {
    return id >= 0 && id < sp_.GetPieceSize() ? sp_.IdToPiece(id) : std::string();
  }
  std::string kind() const override { return "sentencepiece"; }
  int32_t unk_id() const override { return sp_.unk_id(); }
  std::vector<int32_t> added_prefix() const override { return prefix_; }
  std::vector<int32_t> added_suffix() const override { return suffix_; }
  std::vector<std::string> files() const override { return {path_}; }
  std::string hf_class() const override { return "LlamaTokenizer"; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  std::vector<int32_t> prefix_, suffix_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path, const TokenizerConfig& config) {
  return std::make_unique<SentencePieceTokenizer>(path, config);
}

#else

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path, const TokenizerConfig&) {
  ZT_THROW_UNSUPPORTED(path,
                       ": this zerotrain was built without SentencePiece; install "
                       "libsentencepiece-dev and rebuild, or use the model's tokenizer.json");
}

#endif

}  // namespace zt::io
