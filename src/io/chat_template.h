// Chat templates: the Jinja subset that the chat templates of Llama-3, Qwen2 (ChatML) and
// Mistral ship in tokenizer_config.json (`chat_template`), rendered as transformers'
// apply_chat_template renders them (jinja2 with trim_blocks and lstrip_blocks).
//
// What is read: text; {{ expr }}; {% if %}/{% elif %}/{% else %}/{% endif %};
// {% for x in expr %} (with `loop.index0/index/first/last/length/revindex`), {% set name = expr %},
// {% set ns.attr = expr %}; {# comments #}; whitespace control `{%-`, `-%}`, `{{-`, `-}}`;
// {% generation %} tags (TRL's assistant mask markers) as plain content. Expressions:
// string/number/true/false/none literals, lists, names, `a.b`, `a['b']`, `a[i]`, slices
// `a[1:]`, `+ - * / // %`, `~`, `== != < > <= >=`, `in`, `not in`, `and or not`,
// `x if c else y`, `is [not] defined/none/string/number/mapping/iterable/sequence/boolean/
// even/odd`, filters trim, length, count, upper, lower, capitalize, default, first, last,
// string, int, join, reverse, list, safe; methods strip, lstrip, rstrip, startswith,
// endswith, upper, lower, replace, split, items, keys, values, get; functions
// raise_exception, namespace, range. Anything else is BadInput naming the template's
// origin and the construct (nothing is executed that this file does not implement).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace zt::io {

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatTemplateContext {
  std::string bos_token, eos_token;
  bool add_generation_prompt = false;
};

class ChatTemplate {
 public:
  // Parses `source`; `origin` names it in errors (a file, "tokenizer_config.json's
  // chat_template", "built-in template chatml"). BadInput for syntax outside the subset.
  ChatTemplate(const std::string& source, std::string origin);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // BadInput naming the origin when the template raises (raise_exception) or fails.
  std::string render(const std::vector<ChatMessage>& messages, const ChatTemplateContext& context) const;
  const std::string& origin() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The built-in templates by name (chatml, llama3, mistral, alpaca); "" for another name.
std::string builtin_chat_template(const std::string& name);
// "chatml, llama3, mistral, alpaca" (for errors and help).
std::string builtin_chat_template_names();

}  // namespace zt::io
