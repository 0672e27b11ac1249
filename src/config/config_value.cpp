#include "config/config_value.h"
#include "core/strings.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "io/bounded_file.h"
#include "io/unicode.h"

namespace zt::config {

using nlohmann::json;

std::string Where::str() const { return path.empty() ? file : file + ": " + path; }

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// ^[-+]?(0|[1-9][0-9_]*)$
bool yaml_int_form(const std::string& s) {
  size_t i = s.empty() || (s[0] != '+' && s[0] != '-') ? 0 : 1;
  if (i >= s.size()) return false;
  if (s[i] == '0') return i + 1 == s.size();
  if (!is_digit(s[i])) return false;
  for (++i; i < s.size(); ++i)
    if (!is_digit(s[i]) && s[i] != '_') return false;
  return true;
}

// ^[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?$, not ".", "+." or "-.".
bool yaml_float_form(const std::string& s) {
  size_t i = s.empty() || (s[0] != '+' && s[0] != '-') ? 0 : 1;
  const size_t start = i;
  if (i < s.size() && is_digit(s[i]))
    while (i < s.size() && (is_digit(s[i]) || s[i] == '_')) ++i;
  if (i >= s.size() || s[i] != '.') return false;
  if (i == start && i + 1 == s.size()) return false;  // ".", "+.", "-."
  for (++i; i < s.size() && (is_digit(s[i]) || s[i] == '_');) ++i;
  if (i == s.size()) return true;
  if ((s[i] != 'e' && s[i] != 'E') || i + 2 >= s.size() || (s[i + 1] != '+' && s[i + 1] != '-')) return false;
  for (i += 2; i < s.size(); ++i)
    if (!is_digit(s[i])) return false;
  return true;
}

// YAML 1.1 plain-scalar resolution as PyYAML does it: a float needs a dot ("5e8" is a
// string there, and Accelerate users hit exactly that), ints may have signs/underscores.
// Hand-written matchers, not std::regex: libstdc++'s regex recurses once per character and
// overflowed the stack on a scalar of a few megabytes.
json yaml_plain_scalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  const bool is_int = yaml_int_form(s), is_float = !is_int && yaml_float_form(s);
  if (!is_int && !is_float) return s;
  std::string digits = s;
  digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
  if (is_int) {
    errno = 0;
    const long long v = std::strtoll(digits.c_str(), nullptr, 10);
    if (errno == 0) return v;
    return s;  // past 64 bits: as the regex reader did, the text (the number readers say what is wrong)
  }
  return std::strtod(digits.c_str(), nullptr);
}

// What a document has used of the limits (kMaxConfigValues and the others), counted as
// it is read: YAML aliases share nodes, so a small file can name billions of values or
// repeat a 10 MB string 100,000 times, and converting it to JSON copies each one.
class DocumentBudget {
 public:
  // `kind`: "YAML" or "JSON", for the messages.
  DocumentBudget(const std::string& source, const char* kind) : source_(source), kind_(kind) {}
  void value(int depth) {
    if (depth > kMaxConfigDepth)
      ZT_THROW_INPUT(source_, ": the ", kind_, "'s lists and mappings nest deeper than ", kMaxConfigDepth,
                     " levels; a config nests a few: write it flatter");
    if (++values_ > kMaxConfigValues)
      ZT_THROW_INPUT(source_, ": the ", kind_, " expands to more than ", kMaxConfigValues,
                     " values (aliases '*name' repeating anchored lists or mappings?); a config is far smaller: "
                     "write the values out or remove the aliases");
  }
  void bytes(size_t n) {
    bytes_ += static_cast<int64_t>(n);
    if (bytes_ > kMaxConfigExpandedBytes)
      ZT_THROW_INPUT(source_, ": the ", kind_, "'s expanded size exceeds ", kMaxConfigExpandedBytes,
                     " bytes of keys and values (aliases '*name' repeating anchored strings, lists or mappings?); "
                     "a config is far smaller: write the values out or remove the aliases");
  }

 private:
  const std::string& source_;
  const char* kind_;
  int64_t values_ = 0, bytes_ = 0;
};

// YAML is Unicode text (PyYAML refuses other bytes), and every reader of the tree may print
// a value (nlohmann's dump throws on invalid UTF-8): a byte that is not UTF-8, or an escape
// such as "\uD800" that yaml-cpp turns into one, is refused here, once.
void require_utf8(const std::string& s, const std::string& source) {
  if (io::unicode::is_valid_utf8(s)) return;
  ZT_THROW_INPUT(source,
                 ": a key or value is not valid UTF-8 text (a stray byte, or an escape of a lone surrogate "
                 "such as \"\\uD800\"); save the file as UTF-8");
}

json yaml_to_json(const YAML::Node& n, DocumentBudget& budget, const std::string& source, int depth) {
  budget.value(depth);
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      budget.bytes(n.Scalar().size());
      require_utf8(n.Scalar(), source);
      // Quoted scalars carry the "!" tag: they stay strings ('no' stays "no").
      if (n.Tag() == "!") return n.Scalar();
      return yaml_plain_scalar(n.Scalar());
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& item : n) a.push_back(yaml_to_json(item, budget, source, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        if (kv.first.IsMap() || kv.first.IsSequence())
          ZT_THROW_INPUT(source, ": a key that is a list or mapping ('? [a, b]: ...'); keys are names");
        const std::string key = kv.first.Scalar();
        budget.bytes(key.size());
        require_utf8(key, source);
        if (o.contains(key)) ZT_THROW_INPUT(source, ": key '", key, "' appears twice; keep one");
        o[key] = yaml_to_json(kv.second, budget, source, depth + 1);
      }
      return o;
    }
  }
  return nullptr;
}

// JSON through the same budget, and with YAML's rule on repeated keys unless the file is
// one that Python reads (DuplicateKeys::LastWins). Throws json::parse_error for bad syntax.
json parse_json_text(const std::string& text, const std::string& source, DuplicateKeys duplicates) {
  DocumentBudget budget(source, "JSON");
  std::vector<std::set<std::string>> keys;  // one set per open mapping
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        budget.value(depth + 1);
        keys.emplace_back();
        break;
      case json::parse_event_t::array_start:
        budget.value(depth + 1);
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        budget.bytes(key.size());
        if (duplicates == DuplicateKeys::Refuse && !keys.empty() && !keys.back().insert(key).second)
          ZT_THROW_INPUT(source, ": key '", key,
                         "' appears twice in one mapping; keep one (JSON readers disagree on "
                         "which one counts)");
        break;
      }
      case json::parse_event_t::value:
        budget.value(depth + 1);
        if (parsed.is_string()) budget.bytes(parsed.get_ref<const std::string&>().size());
        break;
      default:
        break;
    }
    return true;
  };
  return json::parse(text, cb);
}

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "a mapping";
}

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

json parse_yaml_text(const std::string& text, const std::string& source) {
  try {
    DocumentBudget budget(source, "YAML");
    return yaml_to_json(YAML::Load(text), budget, source, 1);
  } catch (const YAML::Exception& e) {
    ZT_THROW_INPUT(source, ": not valid YAML (line ", e.mark.line + 1, ", column ", e.mark.column + 1, "): ", e.msg);
  }
}

json parse_document_text(const std::string& text, const std::string& source, DocumentFormat format,
                         DuplicateKeys duplicates) {
  json doc;
  if (format == DocumentFormat::Json) {
    try {
      doc = parse_json_text(text, source, duplicates);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past a double (1e400)
      ZT_THROW_INPUT(source, ": not valid JSON (", e.what(),
                     "); fix the syntax (JSON allows no comments or trailing commas)");
    }
  } else {
    doc = parse_yaml_text(text, source);
  }
  if (doc.is_null()) doc = json::object();  // an empty file is an empty config
  if (!doc.is_object())
    ZT_THROW_INPUT(source, ": the top level must be a mapping of keys to values, got ", type_name(doc));
  return doc;
}

json load_document(const std::string& path, DuplicateKeys duplicates) {
  const std::string text = io::read_bounded_file(path, "config file");
  return parse_document_text(text, path, ends_with(lower(path), ".json") ? DocumentFormat::Json : DocumentFormat::Yaml,
                             duplicates);
}

json parse_override_value(const std::string& text) {
  try {
    return parse_json_text(text, "the command line", DuplicateKeys::Refuse);
  } catch (const json::exception&) {  // not JSON (or a number past a double): read on
  }
  // A YAML flow list or mapping, as a run file would write it: [q_proj, v_proj], {r: 8}.
  const size_t first = text.find_first_not_of(" \t"), last = text.find_last_not_of(" \t");
  const bool flow = first != std::string::npos &&
                    ((text[first] == '[' && text[last] == ']') || (text[first] == '{' && text[last] == '}'));
  if (flow) {
    try {
      return parse_yaml_text(text, "the command line");
    } catch (const Error&) {
    }
  }
  return text;
}

std::string closest_name(const std::string& word, const std::vector<std::string>& candidates) {
  // Config keys are matched without regard to case (Train_Batch_Size finds train_batch_size);
  // a longer key may be further off.
  return closest_match(word, candidates, std::max<size_t>(3, word.size() / 3), Case::Insensitive);
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = closest_name(word, candidates);
  return best.empty() ? std::string() : " (did you mean '" + best + "'?)";
}

void require_object(const json& j, const Where& w) {
  if (!j.is_object())
    ZT_THROW_INPUT(w.str(), ": expected a mapping of keys to values, got ", type_name(j), " ", shown(j));
}

void check_known_keys(const json& j, const std::vector<std::string>& known, const Where& w, const std::string& fix) {
  require_object(j, w);
  for (const auto& kv : j.items()) {
    if (std::find(known.begin(), known.end(), kv.key()) != known.end()) continue;
    ZT_THROW_INPUT(w.key(kv.key()).str(), ": unknown key '", kv.key(), "'", did_you_mean(kv.key(), known), "; ", fix);
  }
}

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

double to_number(const json& v, const Where& w) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0' && std::isfinite(x)) return x;
  }
  ZT_THROW_INPUT(w.str(), ": expected a number, got ", type_name(v), " ", shown(v));
}

int64_t to_int(const json& v, const Where& w) {
  if (v.is_number_integer()) return v.get<int64_t>();
  const double x = to_number(v, w);
  if (x != std::floor(x) || std::fabs(x) > 9.0e18) ZT_THROW_INPUT(w.str(), ": expected a whole number, got ", shown(v));
  return static_cast<int64_t>(x);
}

bool to_bool(const json& v, const Where& w) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    // YAML 1.1 booleans PyYAML would have given us.
    const std::string s = lower(v.get<std::string>());
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  ZT_THROW_INPUT(w.str(), ": expected true or false, got ", type_name(v), " ", shown(v));
}

namespace {
template <class T, class Convert>
Setting<T> read(const json& obj, const std::string& key, const Where& w, T dflt, AutoOk auto_ok, Convert convert) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Setting<T>(dflt);
  const Where kw = w.key(key);
  if (is_auto(*it)) {
    if (auto_ok == AutoOk::No) ZT_THROW_INPUT(kw.str(), ": \"auto\" is not resolvable for this key; write a value");
    return Setting<T>(Given::Auto, dflt);
  }
  return Setting<T>(Given::Set, convert(*it, kw));
}
}  // namespace

Setting<int64_t> read_int(const json& obj, const std::string& key, const Where& w, int64_t dflt, AutoOk auto_ok) {
  return read<int64_t>(obj, key, w, dflt, auto_ok, to_int);
}
Setting<double> read_number(const json& obj, const std::string& key, const Where& w, double dflt, AutoOk auto_ok) {
  return read<double>(obj, key, w, dflt, auto_ok, to_number);
}
Setting<bool> read_bool(const json& obj, const std::string& key, const Where& w, bool dflt, AutoOk auto_ok) {
  return read<bool>(obj, key, w, dflt, auto_ok, to_bool);
}
Setting<std::string> read_string(const json& obj, const std::string& key, const Where& w, const std::string& dflt,
                                 AutoOk auto_ok) {
  return read<std::string>(obj, key, w, dflt, auto_ok, [](const json& v, const Where& kw) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number() || v.is_boolean()) return v.dump();  // e.g. gpu_ids: 0
    ZT_THROW_INPUT(kw.str(), ": expected a string, got ", type_name(v), " ", shown(v));
  });
}

std::vector<std::string> read_string_list(const json& obj, const std::string& key, const Where& w) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  const Where kw = w.key(key);
  if (it->is_string()) return {it->get<std::string>()};
  if (!it->is_array()) ZT_THROW_INPUT(kw.str(), ": expected a string or a list of strings, got ", type_name(*it));
  std::vector<std::string> out;
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_string()) ZT_THROW_INPUT(kw.index(i).str(), ": expected a string, got ", type_name((*it)[i]));
    out.push_back((*it)[i].get<std::string>());
  }
  return out;
}

}  // namespace zt::config
