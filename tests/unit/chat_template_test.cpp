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
  EXPECT_EQ(render("{{ '  x '.strip() }}|{{ 'a-b'.split('-') | join('+') }}|{{ 'Hi' | upper }}|{{ x | default('d') }}",
                   {}),
            "x|a+b|HI|d");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.n = ns.n + 1 "
                   "%}{% endif %}{% endfor %}{{ ns.n }}",
                   kNoSystem),
            "2");
  // A set inside a loop does not leak out of it (jinja2's scoping).
  EXPECT_EQ(render("{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}", kNoSystem), "1");
  EXPECT_EQ(render("{% for m in messages if m.role == 'user' %}{{ loop.index }}{{ m.content }}{% endfor %}", kNoSystem),
            "1Hi!22+2?");
  EXPECT_EQ(render("{% if messages[0]['role'] == 'system' %}s{% elif messages | length > 2 %}long{% else %}e{% endif %}",
                   kNoSystem),
            "long");
}

TEST(ChatTemplate, UnsupportedConstructsNameTheTemplateAndTheConstruct) {
  auto parse_error = [](const std::string& src) {
    return error_of([&] { ChatTemplate t(src, "/models/x/tokenizer_config.json (chat_template)"); });
  };
  for (const auto& [src, construct] : std::vector<std::pair<std::string, std::string>>{
           {"{% macro f() %}x{% endmacro %}", "'{% macro %}'"},
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
