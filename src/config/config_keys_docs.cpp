// docs/configs.md's key tables, generated from the config key tables (`zerotrain config
// keys --markdown`); config_keys_test fails when the doc and the table disagree.
#include <string>
#include <vector>

#include "config/config_keys.h"

namespace zt::config {

namespace {

// "`key`", "`key` (alias `a`)", "`key` (aliases `a`, `b`)".
std::string key_cell(const std::string& key, const std::vector<std::string>& aliases) {
  std::string cell = "`" + key + "`";
  if (aliases.empty()) return cell;
  cell += aliases.size() == 1 ? " (alias " : " (aliases ";
  for (size_t i = 0; i < aliases.size(); ++i) cell += (i ? ", `" : "`") + aliases[i] + "`";
  return cell + ")";
}

// "; at most N (why)" for a row with an upper bound.
template <class S>
std::string max_cell(const SectionKey<S>& k) {
  if (k.max_value >= kNoMaximum) return "";
  return "; at most " + key_bound_text(k, k.max_value) + (k.max_why.empty() ? "" : " (" + k.max_why + ")");
}

template <class S>
std::string section_markdown(const std::vector<SectionKey<S>>& keys) {
  std::string s = "| key | default | status |\n|-----|---------|--------|\n";
  for (const SectionKey<S>& k : keys)
    s += "| " + key_cell(k.key, k.aliases) + " | " + k.default_text + " | " + k.doc + max_cell(k) + " |\n";
  return s;
}

}  // namespace

std::string zero_keys_markdown() { return section_markdown(zero_keys()); }
std::string checkpointing_keys_markdown() { return section_markdown(checkpointing_keys()); }
std::string aio_keys_markdown() { return section_markdown(aio_keys()); }
std::string fp16_keys_markdown() { return section_markdown(fp16_keys()); }
std::string bf16_keys_markdown() { return section_markdown(bf16_keys()); }
std::string top_level_keys_markdown() { return section_markdown(top_level_keys()); }

std::string optimizer_param_keys_markdown() {
  std::string s = "| param | types | default | status |\n|-------|-------|---------|--------|\n";
  for (const OptimizerParamKey& k : optimizer_param_keys()) {
    std::string types;
    for (zero::OptimizerType t : k.types)
      types += (types.empty() ? "" : ", ") + std::string(zero::optimizer_type_name(t));
    s += "| `" + k.row.key + "` | " + types + " | " + k.row.default_text + " | " + k.row.doc + " |\n";
  }
  return s;
}

std::string accelerate_keys_markdown() {
  std::string s = "| key | default | status |\n|-----|---------|--------|\n";
  for (const AccelerateKey& k : accelerate_keys())
    s += "| `" + k.key + "` | " + k.default_text + " | " + k.doc + " |\n";
  return s;
}

std::string accelerate_deepspeed_keys_markdown() {
  std::string s = "| key | maps to | status |\n|-----|---------|--------|\n";
  for (const AccelerateKey& k : accelerate_deepspeed_keys())
    s += "| `" + k.key + "` | " + (k.maps_to.empty() ? "—" : k.maps_to) + " | " + k.doc + " |\n";
  return s;
}

std::string run_keys_markdown() {
  std::string s = "| key | default | meaning |\n|-----|---------|---------|\n";
  for (const RunKey& k : run_keys())
    s += "| " + key_cell(k.key, k.aliases) + " | " + k.default_text + " | " + k.doc + " |\n";
  return s;
}

}  // namespace zt::config
