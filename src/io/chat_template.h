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
//
// Templates ship with downloaded models, so they are untrusted input: parsing and every
// render run under ChatTemplateLimits (jinja2's sandbox limits, as transformers renders
// templates in an ImmutableSandboxedEnvironment, plus bounds on nesting, size and work).
// Integers are 64-bit and checked: where Python's unbounded int would grow past 64 bits,
// the render is an error rather than a wrapped value.
#pragma once
#include <cstdint>
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

// What one template may use. Exceeding a limit is BadInput naming the template's origin
// and the limit; the work is counted in steps, not time, so the outcome is the same on
// every machine. The defaults are far above what model templates need (Llama-3's renders
// a 2,000-turn conversation in under 200,000 steps and nests 6 deep).
struct ChatTemplateLimits {
  // Nesting of blocks, brackets and operators in the template (the interpreter recurses
  // this deep) and of the lists and mappings a render builds.
  int max_depth = 256;
  // range()'s length: jinja2's sandbox MAX_RANGE.
  int64_t max_range = 100000;
  // The rendered text, and any one string a render builds.
  int64_t max_output_bytes = int64_t{64} << 20;
  // All the strings, lists and mappings one render builds, together.
  int64_t max_alloc_bytes = int64_t{256} << 20;
  // Work of one render: one step per expression evaluated, statement run or loop turn,
  // per list item or mapping entry copied or compared, and per 64 bytes of text handled.
  int64_t max_steps = 5000000;
};

class ChatTemplate {
 public:
  // Parses `source`; `origin` names it in errors (a file, "tokenizer_config.json's
  // chat_template", "built-in template chatml"). BadInput for syntax outside the subset
  // or nesting past `limits.max_depth`.
  ChatTemplate(const std::string& source, std::string origin, ChatTemplateLimits limits = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // BadInput naming the origin when the template raises (raise_exception), fails, or
  // exceeds a limit.
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
