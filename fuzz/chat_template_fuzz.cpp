// Fuzz target: any bytes as a chat template (templates ship with downloaded models). The
// interpreter must parse and render a small conversation, or fail with a user-facing
// zt::Error (a syntax outside the subset, raise_exception, an exceeded limit); a crash,
// a hang, unbounded memory or an Internal error is a bug. The limits are smaller than the
// defaults so that each input runs in milliseconds; the code that enforces them is the same.
#include <cstdlib>

#include "core/error.h"
#include "fuzz_driver.h"
#include "io/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<zt::io::ChatMessage> messages = {
      {"system", "Be terse."}, {"user", "Hi {{ x }} {% if %}"}, {"assistant", " caf\xc3\xa9 \n"}, {"user", "2+2?"}};
  zt::io::ChatTemplateLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  limits.max_alloc_bytes = 8 << 20;
  try {
    const zt::io::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size), "fuzz.jinja", limits);
    zt::io::ChatTemplateContext c;
    c.bos_token = "<s>";
    c.eos_token = "</s>";
    (void)t.render(messages, c);
    c.add_generation_prompt = true;
    (void)t.render({messages.begin(), messages.begin() + 2}, c);
  } catch (const zt::Error& e) {
    if (e.kind() == zt::ErrorKind::Internal) std::abort();
  }
  return 0;
}

namespace zt::fuzz {
std::vector<std::string> seeds() {
  std::vector<std::string> s;
  for (const char* name : {"chatml", "llama3", "mistral", "alpaca"}) s.push_back(zt::io::builtin_chat_template(name));
  // The defects of issue 40 (each crashed or ran without bound before the limits).
  s.push_back("{{ (-9223372036854775807 - 1) // -1 }}");
  s.push_back("{{ (-9223372036854775807 - 1) % -1 }}{{ -(-9223372036854775807 - 1) }}");
  s.push_back("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  s.push_back(ifs);
  s.push_back("{{ range(10000000000000) | length }}");
  s.push_back("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  s.push_back("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}");
  s.push_back("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}");
  s.push_back(
      "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m['content'][1:-1:2] | trim | upper }}"
      "{{ m.content.split(' ') | join('|') }}{{ {'a': [1, 2.5, none, true]}.items() | list }}{% endfor %}"
      "{{ 'x' in 'xyz' }}{{ 7 // -2 }}{{ 7 % -2 }}{{ 1.5 / 3 }}{{ 'a' ~ 1 ~ none }}{{ messages | length is even }}");
  return s;
}
}  // namespace zt::fuzz
