// Split patterns other than the hand-coded GPT-2/Llama-3/Qwen2 regexes, through PCRE2
// when zerotrain was built with it (optional: the GPU machines lack libpcre2-dev).
// PCRE2 with UTF+UCP is close to Oniguruma for the usual pre-tokenizer patterns, not
// identical for every construct; the known regexes never come here.
#include <memory>
#include <string>

#include "core/error.h"
#include "io/pretokenize.h"

#ifdef ZT_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace zt::io {

#ifdef ZT_WITH_PCRE2
namespace {

class Pcre2Matcher final : public Matcher {
 public:
  Pcre2Matcher(const std::string& pattern, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                          &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      ZT_THROW_UNSUPPORTED(where, ": the regex '", pattern, "' does not compile with PCRE2 (",
                           reinterpret_cast<const char*>(message), " at offset ", offset,
                           "); use a tokenizer.json with a supported pre_tokenizer");
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter
  }
  ~Pcre2Matcher() override { pcre2_code_free(code_); }
  Pcre2Matcher(const Pcre2Matcher&) = delete;
  Pcre2Matcher& operator=(const Pcre2Matcher&) = delete;

  void find(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const override {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    size_t pos = 0;
    while (pos <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, PCRE2_NO_UTF_CHECK,
                                 data.get(), nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
      const size_t b = ov[0], e = ov[1];
      if (e > b) {
        out.emplace_back(b, e);
        pos = e;
      } else {
        // Empty match: step over one character.
        pos = b + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
  }

 private:
  pcre2_code* code_ = nullptr;
};

}  // namespace

std::unique_ptr<Matcher> make_pcre2_matcher(const std::string& pattern, const std::string& where) {
  return std::make_unique<Pcre2Matcher>(pattern, where);
}

#else

std::unique_ptr<Matcher> make_pcre2_matcher(const std::string& pattern, const std::string& where) {
  ZT_THROW_UNSUPPORTED(where, ": the pre-tokenizer regex '", pattern,
                       "' is not one of the built-in ones (GPT-2, Llama-3, Qwen2) and this "
                       "zerotrain was built without PCRE2; install libpcre2-dev and rebuild");
}

#endif

}  // namespace zt::io
