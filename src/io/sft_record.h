// Supervised fine-tuning records -> token ids with a loss mask (`zerotrain prepare` on JSON
// Lines; docs/formats.md "Supervised fine-tuning data").
//
// Record kinds, detected per record:
//   {"messages": [{"role", "content"}, ...]}     a conversation (system/user/assistant); the
//                                                 loss counts the assistant turns only
//   {"prompt", "response"} / {"prompt", "completion"}   the loss counts the response
//   {"instruction", "input"?, "output"}           Alpaca; the loss counts the output
//   {"text"} (the --field)                        plain text: every token counts
//
// Conversations go through a chat template (tokenizer_config.json's chat_template, or
// --chat-template NAME|FILE). Prompt/response and Alpaca records are rendered as TRL and
// Stanford Alpaca do (prompt + response + EOS; Alpaca's prompt format) unless a template
// is named explicitly, which then renders them as a user and an assistant turn.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/chat_template.h"

namespace zt::io {

class Tokenizer;

enum class RecordKind { Text, Messages, PromptResponse, Alpaca };
const char* record_kind_name(RecordKind k);

// The kind of a JSONL record, or false when it is none of them (the caller names the
// record's keys). `field`: the text field (--field); an array there is a conversation.
bool detect_record_kind(const nlohmann::json& record, const std::string& field, RecordKind& kind);

struct SftSample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // 1: the token is a target counted in the loss (its label is not -100)
};

struct SftEncoderOptions {
  std::string field = "text";
  // A template named by the user (a built-in name or a file); "" = the tokenizer's own.
  std::string chat_template;
  std::string chat_template_option = "--chat-template";  // how the user names it, for errors
  int64_t eos_id = -1;  // appended after every sample (-1: none)
};

class SftEncoder {
 public:
  // The tokenizer's own template is looked up beside its files (Tokenizer::files()).
  // BadInput for an unreadable or unsupported template.
  SftEncoder(const Tokenizer& tokenizer, SftEncoderOptions options);
  ~SftEncoder();
  // Encodes one record of `kind`. BadInput (without the file:line, which the caller adds)
  // for a malformed record: a missing or non-string field, an empty conversation, roles
  // the template refuses, no assistant turn.
  SftSample encode(const nlohmann::json& record, RecordKind kind) const;
  // The text encode() tokenizes, before the tokenizer's added prefix and the EOS: a
  // conversation's rendering by the template (also a prompt/response or Alpaca record's when
  // a template is named), prompt + response otherwise, a plain record's text field. What a
  // tokenizer trained for this data reads (a preset's, trained on the run's records). The
  // same BadInput as encode() for a malformed record.
  std::string render(const nlohmann::json& record, RecordKind kind) const;
  // "the tokenizer's chat_template (DIR/tokenizer_config.json)", "built-in template chatml", ...
  std::string template_origin() const;

 private:
  const ChatTemplate& chat_template() const;
  // A record's text and the character spans of its responses; templated: rendered by the
  // chat template (which writes its own specials: no added prefix, no EOS).
  struct Rendered {
    std::string text;
    std::vector<std::pair<size_t, size_t>> spans;
    bool templated = false;
  };
  Rendered rendered(const nlohmann::json& record, RecordKind kind) const;
  SftSample encode_spans(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans,
                         bool add_prefix) const;

  const Tokenizer& tok_;
  SftEncoderOptions o_;
  std::unique_ptr<ChatTemplate> template_;
  std::string template_missing_;  // why there is no template, for the error on a conversation
  ChatTemplateContext ctx_;
};

// SFT samples that train nothing once cut to a window (data.packing: false pads each sample
// into a window of seq_len + 1 tokens, cut at the end): their first target — a token with
// mask 1 at index >= 1, token 0 having no previous token to predict it from — lies past
// the window, because the prompt fills it. Every label of such a sample is masked: its
// loss and gradient are 0.
struct UntrainedSamples {
  int64_t samples = 0;                // samples looked at
  int64_t count = 0;                  // of them, with no target within the window
  std::vector<std::string> examples;  // the first few of those: a record's "FILE:LINE", or "SHARD, sample K"
  int64_t seq_len_needed = 0;         // the smallest seq_len that gives each of them a target (0: none would)
  static constexpr size_t kMaxExamples = 5;
};

// The index of a sample's first target (>= 1), or -1 when it has none.
int64_t first_target(const uint8_t* mask, int64_t n);

// Counts one sample of n tokens, cut to `window` tokens, into `u`; `where` names it (called
// only for the first few without a target).
template <class Where>
void count_untrained(UntrainedSamples& u, const uint8_t* mask, int64_t n, int64_t window, Where&& where) {
  ++u.samples;
  const int64_t first = first_target(mask, n);
  if (first >= 1 && first < window) return;
  if (u.count++ < static_cast<int64_t>(UntrainedSamples::kMaxExamples)) u.examples.push_back(where());
  if (first >= 1 && first > u.seq_len_needed) u.seq_len_needed = first;  // window seq_len + 1 > first
}

// The samples of version 2 (SFT) shards, each cut to `window` tokens (plain shards have
// none: samples == 0). Reads each sample's mask within the window, and the rest of it only
// when the window holds no target. BadInput when a shard is malformed.
UntrainedSamples untrained_samples(const std::vector<std::string>& shards, int64_t window);

// The chat template beside a tokenizer: DIR/chat_template.jinja, else tokenizer_config.json's
// chat_template (a string, or a list of {name, template}: the "default" one). Sets `origin`;
// "" when there is none.
std::string read_tokenizer_chat_template(const std::string& tokenizer_dir, std::string& origin);

}  // namespace zt::io
