// SFT records -> ids + loss mask (io/sft_record.h).
//
// How the loss mask is found: the sample's text is rendered whole, and the character span
// of every response is found (a conversation's assistant turns by incremental rendering,
// below; a prompt/response record's response is what follows the prompt). The text is
// then tokenized once, as apply_chat_template tokenizes it, and a span's tokens are found
// by tokenizing the text up to the span's start and up to its end: the span starts at the
// first token where the prefix's tokens leave the whole text's tokens (so a token that
// straddles the boundary counts in the loss) and ends where the prefix up to its end
// stops agreeing with them (a straddling token there does not count).
//
// Assistant turns by incremental rendering: for the assistant message i, P = render(
// messages[:i], add_generation_prompt=true) and F = render(messages[:i+1]); the turn is
// the characters [len(P), len(F)) of the whole rendering, so it holds the assistant's
// content and what the template closes the turn with (<|im_end|>\n, <|eot_id|>, </s>),
// and not the generation prompt (<|im_start|>assistant\n). The template must render
// prefixes that the whole conversation extends (every template of the three families
// does); one that does not is an error naming it.
#include "io/sft_record.h"
#include "core/strings.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_file.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"

namespace zt::io {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kTemplateFileCap = 16u << 20;

// Stanford Alpaca's prompt format (github.com/tatsu-lab/stanford_alpaca, train.py).
std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty())
    return "Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:\n";
  return "Below is an instruction that describes a task, paired with an input that provides further context. Write "
         "a response that appropriately completes the request.\n\n### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

std::string string_field(const json& r, const char* key, bool optional = false) {
  auto it = r.find(key);
  if (it == r.end() || it->is_null()) {
    if (optional) return "";
    ZT_THROW_INPUT("no field '", key, "'");
  }
  if (!it->is_string()) ZT_THROW_INPUT("field '", key, "' is a ", it->type_name(), "; it must be a string");
  return it->get<std::string>();
}

// Tokens shared by a and b from the start.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

const char* record_kind_name(RecordKind k) {
  switch (k) {
    case RecordKind::Text:
      return "text";
    case RecordKind::Messages:
      return "messages";
    case RecordKind::PromptResponse:
      return "prompt/response";
    case RecordKind::Alpaca:
      return "alpaca";
  }
  return "?";
}

bool detect_record_kind(const json& r, const std::string& field, RecordKind& kind) {
  if (!r.is_object()) return false;
  if (auto it = r.find(field); it != r.end()) {
    if (it->is_string()) return kind = RecordKind::Text, true;
    if (it->is_array()) return kind = RecordKind::Messages, true;
  }
  if (auto it = r.find("messages"); it != r.end() && it->is_array()) return kind = RecordKind::Messages, true;
  if (r.contains("prompt") && (r.contains("response") || r.contains("completion")))
    return kind = RecordKind::PromptResponse, true;
  if (r.contains("instruction") && r.contains("output")) return kind = RecordKind::Alpaca, true;
  return false;
}

std::string read_tokenizer_chat_template(const std::string& dir, std::string& origin) {
  origin.clear();
  if (dir.empty()) return "";
  const std::string jinja = dir + "/chat_template.jinja";
  if (fs::is_regular_file(jinja)) {
    origin = jinja;
    return read_bounded_file(jinja, "chat template", kTemplateFileCap);
  }
  const std::string path = dir + "/tokenizer_config.json";
  if (!fs::is_regular_file(path)) return "";
  json j;
  try {
    j = json::parse(read_bounded_file(path, "tokenizer file", kTemplateFileCap));
  } catch (const json::exception& e) {
    ZT_THROW_INPUT(path, ": not valid JSON (", e.what(), ")");
  }
  auto it = j.is_object() ? j.find("chat_template") : j.end();
  if (it == j.end() || it->is_null()) return "";
  origin = path + " (chat_template)";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // named templates, as transformers saves several: the "default" one
    for (const auto& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
    ZT_THROW_INPUT(path, ": chat_template is a list without a 'default' template; pass --chat-template FILE");
  }
  ZT_THROW_INPUT(path, ": chat_template must be a string, got ", it->type_name());
}

SftEncoder::SftEncoder(const Tokenizer& tokenizer, SftEncoderOptions options)
    : tok_(tokenizer), o_(std::move(options)) {
  if (tok_.bos_id() >= 0) ctx_.bos_token = tok_.token(tok_.bos_id());
  if (tok_.eos_id() >= 0) ctx_.eos_token = tok_.token(tok_.eos_id());
  if (!o_.chat_template.empty()) {
    const std::string builtin = builtin_chat_template(o_.chat_template);
    if (!builtin.empty()) {
      template_ = std::make_unique<ChatTemplate>(builtin, "built-in template " + o_.chat_template);
    } else if (fs::is_regular_file(o_.chat_template)) {
      template_ = std::make_unique<ChatTemplate>(read_bounded_file(o_.chat_template, "chat template", kTemplateFileCap),
                                                 o_.chat_template);
    } else {
      ZT_THROW_INPUT(o_.chat_template_option, " ", o_.chat_template, ": neither a built-in template (",
                     builtin_chat_template_names(), ") nor a file");
    }
    return;
  }
  const std::vector<std::string> files = tok_.files();
  const std::string dir = files.empty() ? "" : fs::path(files.front()).parent_path().string();
  std::string origin;
  // The tokenizer's template matters only to conversations: its errors wait for one.
  try {
    const std::string source = read_tokenizer_chat_template(dir, origin);
    if (!source.empty()) template_ = std::make_unique<ChatTemplate>(source, origin);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    template_missing_ = e.what();
    return;
  }
  if (!template_)
    template_missing_ =
        str("the tokenizer", dir.empty() ? "" : " (" + dir + ")", " has no chat_template; name one with ",
            o_.chat_template_option, " (", builtin_chat_template_names(), ", or a Jinja file)");
}

SftEncoder::~SftEncoder() = default;

std::string SftEncoder::template_origin() const { return template_ ? template_->origin() : "none"; }

const ChatTemplate& SftEncoder::chat_template() const {
  if (!template_) ZT_THROW_INPUT("a conversation needs a chat template: ", template_missing_);
  return *template_;
}

SftSample SftEncoder::encode_spans(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans,
                                   bool add_prefix) const {
  SftSample s;
  if (add_prefix) s.ids = tok_.added_prefix();
  const size_t offset = s.ids.size();
  const std::vector<int32_t> ids = tok_.encode(text);
  s.ids.insert(s.ids.end(), ids.begin(), ids.end());
  s.mask.assign(s.ids.size(), 0);
  for (const auto& [b, e] : spans) {
    const size_t first = common_prefix(tok_.encode(text.substr(0, b)), ids);
    const size_t last = e >= text.size() ? ids.size() : common_prefix(tok_.encode(text.substr(0, e)), ids);
    for (size_t i = first; i < last; ++i) s.mask[offset + i] = 1;
  }
  if (o_.eos_id >= 0) {
    s.ids.push_back(static_cast<int32_t>(o_.eos_id));
    s.mask.push_back(spans.empty() ? 0 : 1);
  }
  return s;
}

std::string SftEncoder::render(const json& r, RecordKind kind) const { return rendered(r, kind).text; }

SftSample SftEncoder::encode(const json& r, RecordKind kind) const {
  const Rendered x = rendered(r, kind);
  if (!x.templated) {
    SftSample s = encode_spans(x.text, x.spans, true);
    if (kind == RecordKind::Text) s.mask.assign(s.ids.size(), 1);  // plain text: every token counts
    return s;
  }
  // The template writes the specials itself (bos_token), as apply_chat_template's text;
  // no EOS is appended: the template closes every turn.
  SftSample s;
  s.ids = tok_.encode(x.text);
  s.mask.assign(s.ids.size(), 0);
  for (const auto& [b, e] : x.spans) {
    const size_t first = common_prefix(tok_.encode(x.text.substr(0, b)), s.ids);
    const size_t last = e >= x.text.size() ? s.ids.size() : common_prefix(tok_.encode(x.text.substr(0, e)), s.ids);
    for (size_t k = first; k < last; ++k) s.mask[k] = 1;
  }
  return s;
}

SftEncoder::Rendered SftEncoder::rendered(const json& r, RecordKind kind) const {
  std::vector<ChatMessage> messages;
  switch (kind) {
    case RecordKind::Text:
      return {string_field(r, o_.field.c_str()), {{0, std::string::npos}}, false};
    case RecordKind::PromptResponse:
    case RecordKind::Alpaca: {
      std::string prompt, response;
      if (kind == RecordKind::PromptResponse) {
        prompt = string_field(r, "prompt");
        response = string_field(r, r.contains("response") ? "response" : "completion");
      } else {
        const std::string instruction = string_field(r, "instruction"), input = string_field(r, "input", true);
        response = string_field(r, "output");
        prompt = o_.chat_template.empty() ? alpaca_prompt(instruction, input)
                                          : (input.empty() ? instruction : instruction + "\n\n" + input);
      }
      if (o_.chat_template.empty()) return {prompt + response, {{prompt.size(), std::string::npos}}, false};
      messages = {{"user", prompt}, {"assistant", response}};
      break;
    }
    case RecordKind::Messages: {
      const json& list = r.contains(o_.field) && r[o_.field].is_array() ? r[o_.field] : r["messages"];
      if (list.empty()) ZT_THROW_INPUT("an empty conversation");
      for (size_t i = 0; i < list.size(); ++i) {
        const json& m = list[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
          ZT_THROW_INPUT("message ", i, " has no string 'role'");
        auto c = m.find("content");
        if (c == m.end() || !c->is_string())
          ZT_THROW_INPUT("message ", i, " (", m["role"].get<std::string>(),
                         ") has no string 'content' (lists of content parts are not read)");
        messages.push_back({m["role"].get<std::string>(), c->get<std::string>()});
      }
      break;
    }
  }
  const ChatTemplate& t = chat_template();
  const std::string full = t.render(messages, ctx_);
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    const std::vector<ChatMessage> before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
    const std::vector<ChatMessage> through(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i + 1));
    ChatTemplateContext gen = ctx_;
    gen.add_generation_prompt = true;
    const std::string p = t.render(before, gen), f = t.render(through, ctx_);
    if (!starts_with(f, p) || !starts_with(full, f))
      ZT_THROW_INPUT("cannot find assistant turn ", i, " in the rendering of ", t.origin(),
                     ": the conversation up to it does not render as a prefix of the whole (the loss mask is found "
                     "by rendering prefixes; use a template that renders them, e.g. a built-in one)");
    if (f.size() > p.size()) spans.emplace_back(p.size(), f.size());
  }
  if (spans.empty()) ZT_THROW_INPUT("the conversation has no assistant turn to train on");
  return {full, std::move(spans), true};
}

int64_t first_target(const uint8_t* mask, int64_t n) {
  for (int64_t i = 1; i < n; ++i)
    if (mask[i]) return i;
  return -1;
}

UntrainedSamples untrained_samples(const std::vector<std::string>& shards, int64_t window) {
  UntrainedSamples u;
  std::vector<uint8_t> mask;
  for (const std::string& path : shards) {
    const std::unique_ptr<TokenShard> shard = open_token_shard(path);
    if (!shard->has_loss_mask()) continue;
    const std::vector<int64_t>& starts = shard->sample_starts();
    for (size_t k = 0; k < starts.size(); ++k) {
      const int64_t len = (k + 1 < starts.size() ? starts[k + 1] : shard->size()) - starts[k];
      // The window first (all that most samples need), the whole sample only when its
      // window has no target: where its first target is tells the seq_len that trains it.
      int64_t n = std::min(len, window);
      mask.resize(static_cast<size_t>(n));
      if (n > 0) shard->read_mask(starts[k], n, mask.data());
      if (first_target(mask.data(), n) < 0 && len > n) {
        n = len;
        mask.resize(static_cast<size_t>(n));
        shard->read_mask(starts[k], n, mask.data());
      }
      count_untrained(u, mask.data(), n, window, [&] { return path + ", sample " + std::to_string(k); });
    }
  }
  return u;
}

}  // namespace zt::io
