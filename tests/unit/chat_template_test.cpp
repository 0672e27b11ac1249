// The Jinja-subset chat template interpreter (io/chat_template.h) on the templates Llama-3,
// Qwen2 and Mistral ship (tests/data/chat_templates/). The expected strings are what
// transformers' apply_chat_template(tokenize=False) gives, derived by reading each
// template (jinja2 with trim_blocks and lstrip_blocks, as transformers compiles them).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/chat_template.h"

using namespace zt;
using namespace zt::io;

namespace {

std::string read_template(const std::string& name) {
  const std::string path = std::string(ZT_SOURCE_DIR) + "/tests/data/chat_templates/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string render(const std::string& source, const std::vector<ChatMessage>& m, bool gen = false,
                   const std::string& bos = "<s>", const std::string& eos = "</s>") {
  ChatTemplate t(source, "test template");
  ChatTemplateContext c;
  c.bos_token = bos;
  c.eos_token = eos;
  c.add_generation_prompt = gen;
  return t.render(m, c);
}

const std::vector<ChatMessage> kWithSystem = {
    {"system", "You are terse."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}, {"assistant", " 4 "}};
const std::vector<ChatMessage> kNoSystem = {{"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

TEST(ChatTemplate, Llama3Instruct) {
  const std::string t = read_template("llama3_instruct.jinja");
  // content | trim binds before +: " 4 " renders as "4".
  EXPECT_EQ(render(t, kWithSystem, false, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>");
  EXPECT_EQ(render(t, kNoSystem, true, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Qwen2InstructChatml) {
  const std::string t = read_template("qwen2_instruct.jinja");
  EXPECT_EQ(render(t, kWithSystem),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n 4 <|im_end|>\n");
  // Without a system message the template adds its default one; the generation prompt.
  EXPECT_EQ(render(t, kNoSystem, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, MistralInstructV02) {
  const std::string t = read_template("mistral_instruct_v02.jinja");
  EXPECT_EQ(render(t, {{"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}, {"assistant", " 4 "}}),
            "<s>[INST] Hi! [/INST]Hello.</s>[INST] 2+2? [/INST] 4 </s>");
  // A system message breaks the alternation: raise_exception is exit 2 with its message.
  const std::string e = error_of([&] { render(t, kWithSystem); });
  EXPECT_NE(e.find("test template"), std::string::npos) << e;
  EXPECT_NE(e.find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos) << e;
}

TEST(ChatTemplate, MistralInstructV03WhitespaceControl) {
  const std::string t = read_template("mistral_instruct_v03.jinja");
  // {%- / {{- strip the template's indentation and newlines; trim_blocks drops the last
  // newline; the system message (set at the top level) joins the first user turn.
  EXPECT_EQ(render(t, kWithSystem), "<s> [INST] You are terse.\n\nHi! [/INST] Hello.</s> [INST] 2+2? [/INST]  4 </s>");
  EXPECT_EQ(render(t, kNoSystem), "<s> [INST] Hi! [/INST] Hello.</s> [INST] 2+2? [/INST]");
  const std::string e = error_of([&] { render(t, {{"assistant", "x"}}); });
  EXPECT_NE(e.find("After the optional system message"), std::string::npos) << e;
}

TEST(ChatTemplate, BuiltinsEqualTheShippedTemplates) {
  EXPECT_EQ(render(builtin_chat_template("llama3"), kWithSystem),
            render(read_template("llama3_instruct.jinja"), kWithSystem));
  EXPECT_EQ(render(builtin_chat_template("mistral"), kNoSystem, false),
            render(read_template("mistral_instruct_v02.jinja"), kNoSystem, false));
  // chatml: Qwen2's without the default system prompt.
  EXPECT_EQ(render(builtin_chat_template("chatml"), kNoSystem, true),
            "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?"
            "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(builtin_chat_template("alpaca"), {{"user", "Say hi."}, {"assistant", "Hi."}}, false, "", "</s>"),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nSay hi.\n\n### Response:\nHi.</s>");
  EXPECT_EQ(builtin_chat_template("vicuna"), "");
}

TEST(ChatTemplate, TrimAndLstripBlocks) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before
  // a block tag goes; an expression tag's surroundings stay.
  EXPECT_EQ(render("{% for m in messages %}\n    {{ m.role }}: {{ m.content }}\n  {% endfor %}\n", kNoSystem),
            "    user: Hi!\n    assistant: Hello.\n    user: 2+2?\n");
  EXPECT_EQ(render("a  {#- note -#}  b {# c #}\nd", {}), "ab d");
}

TEST(ChatTemplate, Expressions) {
  EXPECT_EQ(render("{{ messages | length }} {{ messages[-1].content }} {{ messages[1:] | length }}", kNoSystem),
            "3 2+2? 2");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 % 3 }} {{ 1 + 2 * 3 }} {{ 'a' ~ 1 }} {{ 'x' if false else 'y' }}", {}),
            "3 2 7 a1 y");
  EXPECT_EQ(render("{{ 'ab' in 'cabd' }} {{ 'z' not in ['a'] }} {{ none is none }} {{ foo is defined }}", {}),
            "True True True False");
  EXPECT_EQ(
      render("{{ '  x '.strip() }}|{{ 'a-b'.split('-') | join('+') }}|{{ 'Hi' | upper }}|{{ x | default('d') }}", {}),
      "x|a+b|HI|d");
  EXPECT_EQ(
      render("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.n = ns.n + 1 "
             "%}{% endif %}{% endfor %}{{ ns.n }}",
             kNoSystem),
      "2");
  // A set inside a loop does not leak out of it (jinja2's scoping).
  EXPECT_EQ(render("{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}", kNoSystem), "1");
  EXPECT_EQ(render("{% for m in messages if m.role == 'user' %}{{ loop.index }}{{ m.content }}{% endfor %}", kNoSystem),
            "1Hi!22+2?");
  EXPECT_EQ(
      render("{% if messages[0]['role'] == 'system' %}s{% elif messages | length > 2 %}long{% else %}e{% endif %}",
             kNoSystem),
      "long");
}

TEST(ChatTemplate, UnsupportedConstructsNameTheTemplateAndTheConstruct) {
  auto parse_error = [](const std::string& src) {
    return error_of([&] { ChatTemplate t(src, "/models/x/tokenizer_config.json (chat_template)"); });
  };
  for (const auto& [src, construct] :
       std::vector<std::pair<std::string, std::string>>{{"{% macro f() %}x{% endmacro %}", "'{% macro %}'"},
                                                        {"{{ tools | tojson }}", "filter 'tojson'"},
                                                        {"{{ strftime_now('%Y') }}", "function 'strftime_now()'"},
                                                        {"{{ x.format(1) }}", "method '.format()'"},
                                                        {"{% include 'a' %}", "'{% include %}'"},
                                                        {"{{ x is divisibleby 3 }}", "test 'is divisibleby'"}}) {
    const std::string e = parse_error(src);
    EXPECT_NE(e.find("/models/x/tokenizer_config.json (chat_template)"), std::string::npos) << e;
    EXPECT_NE(e.find(construct), std::string::npos) << src << " -> " << e;
  }
  EXPECT_NE(parse_error("{% if x %}a").find("endif"), std::string::npos);
  EXPECT_NE(parse_error("{{ x ").find("unclosed"), std::string::npos);
  // Arithmetic on an undefined value fails at render time, naming the template.
  const std::string e = error_of([] { render("{{ nothing + 'a' }}", {}); });
  EXPECT_NE(e.find("undefined"), std::string::npos) << e;
}

// ---- limits: templates ship with downloaded models and are untrusted ----------------

namespace {

const char* const kOrigin = "/models/x/chat_template.jinja";

std::string render_error(const std::string& src, const ChatTemplateLimits& limits = {},
                         const std::vector<ChatMessage>& m = kNoSystem) {
  return error_of([&] {
    ChatTemplate t(src, kOrigin, limits);
    t.render(m, ChatTemplateContext{});
  });
}

std::string render_ok(const std::string& src, const ChatTemplateLimits& limits = {}) {
  ChatTemplate t(src, kOrigin, limits);
  return t.render(kNoSystem, ChatTemplateContext{});
}

void expect_error(const std::string& src, const std::string& what, const ChatTemplateLimits& limits = {}) {
  const std::string e = render_error(src, limits);
  EXPECT_NE(e.find(kOrigin), std::string::npos) << src.substr(0, 100) << " -> " << e;
  EXPECT_NE(e.find(what), std::string::npos) << src.substr(0, 100) << " -> " << e;
}

std::string repeat(const std::string& s, int n) {
  std::string r;
  for (int i = 0; i < n; ++i) r += s;
  return r;
}

}  // namespace

TEST(ChatTemplateLimits, IntegerArithmeticIsCheckedNotTrapped) {
  // INT64_MIN // -1 raised SIGFPE and killed the process; Python's unbounded ints give
  // 2^63, which 64 bits cannot hold: an error naming the template.
  expect_error("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow");
  // x % -1 is 0 in Python for every x (the same division trapped here).
  EXPECT_EQ(render_ok("{{ (-9223372036854775807 - 1) % -1 }} {{ 7 % -1 }} {{ 7 // -1 }} {{ -7 // 2 }} {{ 7 % -3 }}"),
            "0 0 -7 -4 -2");
  expect_error("{{ -(-9223372036854775807 - 1) }}", "integer overflow");
  expect_error("{{ 9223372036854775807 + 1 }}", "integer overflow");
  expect_error("{{ -9223372036854775807 - 2 }}", "integer overflow");
  expect_error("{{ 4611686018427387904 * 2 }}", "integer overflow");
  expect_error("{{ 1 // 0 }}", "division or modulo by zero");
  expect_error("{{ 1 % 0 }}", "division or modulo by zero");
  expect_error("{{ 1.5 / 0 }}", "division by zero");
  // A literal past 64 bits (Python would hold it) is refused at parse time.
  expect_error("{{ 99999999999999999999 }}", "beyond 64-bit");
  const std::string e308 = "1" + std::string(308, '0') + ".0";
  expect_error("{{ (" + e308 + " * 10) | int }}", "integer overflow");
  EXPECT_EQ(render_ok("{{ " + e308 + " * 10 }} {{ " + e308 + " * 10 - " + e308 + " * 10 }}"), "inf nan");
  // A slice step near the 64-bit limit must not overflow the index.
  EXPECT_EQ(render_ok("{{ 'abc'[1::9223372036854775807] }}{{ 'abc'[::-9223372036854775807] }}"), "bc");
}

TEST(ChatTemplateLimits, NestingIsBoundedAtParse) {
  // 5,000 nested brackets or blocks overflowed the stack (SIGSEGV).
  expect_error("{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}", "nests deeper than 256");
  expect_error("{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}", "nests deeper than 256");
  expect_error(repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000), "nests deeper than 256");
  expect_error(repeat("{% for m in messages %}", 5000) + repeat("{% endfor %}", 5000), "nests deeper than 256");
  expect_error(repeat("{% if true %}x{% else %}", 5000) + repeat("{% endif %}", 5000), "nests deeper than 256");
  expect_error("{{ " + repeat("not ", 5000) + "1 }}", "nests deeper than 256");
  expect_error("{{ " + repeat("- ", 5000) + "1 }}", "nests deeper than 256");
  // A chain is parsed by a loop but rendered by recursion: its height counts too.
  expect_error("{{ 1" + repeat(" + 1", 100000) + " }}", "nests deeper than 256");
  expect_error("{{ 'a'" + repeat("|trim", 100000) + " }}", "nests deeper than 256");
  expect_error("{{ messages" + repeat("[0]", 100000) + " }}", "nests deeper than 256");
  // Blocks and the expressions inside them count together.
  expect_error(repeat("{% if true %}", 200) + "{{ " + repeat("(", 100) + "1" + repeat(")", 100) + " }}" +
                   repeat("{% endif %}", 200),
               "nests deeper than 256");
  // What model templates do stays well inside.
  EXPECT_EQ(render_ok(repeat("{% if true %}", 50) + "{{ 1" + repeat(" + 1", 100) + " }}" + repeat("{% endif %}", 50)),
            "101");
}

TEST(ChatTemplateLimits, RangeIsJinja2SandboxMaxRange) {
  // range(10000000000000) aborted with bad_alloc at 4.4 GB.
  expect_error("{{ range(10000000000000) | length }}", "jinja2's sandbox MAX_RANGE");
  expect_error("{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}", "the limit is 100000");
  expect_error("{{ range(100001) | length }}", "range() of 100001 numbers");
  EXPECT_EQ(render_ok("{{ range(100000) | length }} {{ range(0, 9223372036854775807, 4611686018427387904) | "
                      "join(',') }} {{ range(5, -9223372036854775807 - 1, -9223372036854775807) | join(',') }}"),
            "100000 0,4611686018427387904 5,-9223372036854775802");
}

TEST(ChatTemplateLimits, StringsListsAndValuesAreBounded) {
  // String doubling reached 6 GB: a string past 64 MiB is refused.
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               "builds a string of 134217728 bytes; the limit is 67108864");
  // `~` reads both sides as text too: the work budget ends it first.
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "runs more than 5000000 steps");
  expect_error(
      "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s.replace('x', ns.s) "
      "%}{% endfor %}",
      "builds a string of");
  // List doubling: every item built counts.
  expect_error("{% set ns = namespace(l=['x']) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "runs more than 5000000 steps");
  // And what all strings, lists and mappings built take together (each one below the limits).
  ChatTemplateLimits more_steps;
  more_steps.max_steps = int64_t{1} << 40;
  expect_error(
      "{% set ns = namespace(s='x') %}{% for i in range(25) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
      "{% for i in range(100) %}{% set t = ns.s + 'y' %}{% endfor %}",
      "builds more than 268435456 bytes of strings, lists and mappings", more_steps);
  expect_error("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}",
               "nests lists or mappings deeper than 256");
  // The output: 2^20-byte string written 100 times exceeds a 64 MiB budget.
  expect_error(
      "{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
      "{% for i in range(100) %}{{ ns.s }}{% endfor %}",
      "output exceeds 67108864 bytes");
  ChatTemplateLimits small;
  small.max_output_bytes = 12;
  expect_error("{% for m in messages %}{{ m.content }}{% endfor %}", "output exceeds 12 bytes", small);
  small.max_output_bytes = 13;
  EXPECT_EQ(render_ok("{% for m in messages %}{{ m.content }}{% endfor %}", small), "Hi!Hello.2+2?");
}

TEST(ChatTemplateLimits, WorkIsCountedInStepsNotTime) {
  // Nested loops ran past 60 s; the budget is steps, so the outcome is the same on any machine.
  expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               "runs more than 5000000 steps");
  // Work on text counts by its length: comparing or searching long strings over and over.
  expect_error(
      "{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
      "{% set t = ns.s ~ '' %}{% for i in range(100000) %}{% if ns.s == t or 'y' in t %}{% endif %}"
      "{% endfor %}",
      "runs more than 5000000 steps");
  ChatTemplateLimits small;
  small.max_steps = 1000;
  expect_error("{% for i in range(1000) %}{{ i }}{% endfor %}", "runs more than 1000 steps", small);
  // The shipped templates take a small part of the default budget for a long conversation.
  std::vector<ChatMessage> long_chat;
  for (int i = 0; i < 2000; ++i) long_chat.push_back({i % 2 ? "assistant" : "user", std::string(500, 'a')});
  ChatTemplateLimits tight;
  tight.max_steps = 1000000;
  for (const char* name : {"llama3_instruct.jinja", "qwen2_instruct.jinja", "mistral_instruct_v03.jinja"}) {
    ChatTemplate t(read_template(name), name, tight);
    EXPECT_GT(t.render(long_chat, ChatTemplateContext{}).size(), 1000000u) << name;
  }
}
