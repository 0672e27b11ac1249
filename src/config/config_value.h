// Reading config documents as users write them. Every config (ds_config.json, Accelerate
// YAML, run config) is loaded into one JSON tree first (YAML converted with YAML 1.1
// scalar rules, as PyYAML reads it), then read through these helpers, which give every
// error the same shape: "<file>: <dotted.key>: <what is wrong>; <the fix>".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

// lower(), for the case-insensitive names (optimizer types, devices), comes with this header.
#include "core/strings.h"

namespace zt::config {

// How a value was written: not at all, as "auto" (resolved later from the run), or set.
enum class Given { Absent, Auto, Set };

// A value that may be absent or "auto". `value` holds the default while absent.
template <class T>
struct Setting {
  Given given = Given::Absent;
  T value{};
  Setting() = default;
  Setting(T v) : value(std::move(v)) {}  // NOLINT: a default value
  Setting(Given g, T v) : given(g), value(std::move(v)) {}
  bool is_set() const { return given == Given::Set; }
  bool is_auto() const { return given == Given::Auto; }
  bool is_absent() const { return given == Given::Absent; }
};

// Whether a key may be written as "auto".
enum class AutoOk { No, Yes };

// The location of a value, for error messages: file and dotted key path.
struct Where {
  std::string file;
  std::string path;  // "" = the document's top level
  Where key(const std::string& k) const { return {file, path.empty() ? k : path + "." + k}; }
  Where index(size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
  // "file: key" (or just "file" at top level).
  std::string str() const;
};

// What one config document may hold once read, YAML aliases expanded: a config has
// hundreds of values and kilobytes of text, but a few lines of aliases (`*name` repeating
// an anchored list) multiply into billions of values or gigabytes of strings. Past these
// the document is refused (BadInput naming it) before the copies exhaust memory. JSON has
// no aliases; the same limits apply to it, so every config is read one way.
inline constexpr int64_t kMaxConfigValues = 1000000;
inline constexpr int64_t kMaxConfigExpandedBytes = int64_t{32} << 20;  // scalars and keys, summed
inline constexpr int kMaxConfigDepth = 100;                            // lists and mappings nested

// Whether a JSON document may repeat a key in one mapping. Configs users write refuse it
// (BadInput naming the key), as the YAML reader always does; JSON that HF tools write and
// Python's json.load reads (config.json) keeps the last value, as Python does.
enum class DuplicateKeys { Refuse, LastWins };
enum class DocumentFormat { Json, Yaml };

// Loads a .json, .yaml or .yml file as a JSON tree (YAML: quoted scalars stay strings;
// plain scalars become null/bool/int/float by YAML 1.1 rules, so "5e8" stays a string,
// which the number readers below accept). Missing or malformed file: BadInput naming it.
nlohmann::json load_document(const std::string& path, DuplicateKeys duplicates = DuplicateKeys::Refuse);
// The text of a config document as load_document reads it: a mapping at the top (an
// empty document is an empty mapping); `source` names it in errors.
nlohmann::json parse_document_text(const std::string& text, const std::string& source, DocumentFormat format,
                                   DuplicateKeys duplicates = DuplicateKeys::Refuse);
// Parses YAML (or JSON, which is YAML) text the same way; `source` names it in errors.
nlohmann::json parse_yaml_text(const std::string& text, const std::string& source);
// A command-line value: JSON when it parses as JSON (3e-4, true, [0.9,0.95], {"a":1}), a
// YAML flow list or mapping as a run file writes it ([q_proj, v_proj], {r: 8}), else the
// plain string.
nlohmann::json parse_override_value(const std::string& text);

// The closest candidate within a small edit distance, or "".
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);
// " (did you mean X?)" or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// Requires `j` to be an object (BadInput naming `w` otherwise).
void require_object(const nlohmann::json& j, const Where& w);
// Every key of object `j` must be in `known`: otherwise BadInput naming the key, with a
// did-you-mean and `fix` (e.g. "see docs/configs.md#zero_optimization").
void check_known_keys(const nlohmann::json& j, const std::vector<std::string>& known, const Where& w,
                      const std::string& fix);

bool is_auto(const nlohmann::json& v);

// Readers: absent key -> Setting with `dflt`; "auto" -> Given::Auto when allowed (else
// BadInput); wrong type -> BadInput naming the key and the expected type. Numbers
// accept numeric strings ("5e8", YAML 1.1) and integral floats for integers (5e8).
Setting<int64_t> read_int(const nlohmann::json& obj, const std::string& key, const Where& w, int64_t dflt,
                          AutoOk auto_ok = AutoOk::No);
Setting<double> read_number(const nlohmann::json& obj, const std::string& key, const Where& w, double dflt,
                            AutoOk auto_ok = AutoOk::No);
Setting<bool> read_bool(const nlohmann::json& obj, const std::string& key, const Where& w, bool dflt,
                        AutoOk auto_ok = AutoOk::No);
Setting<std::string> read_string(const nlohmann::json& obj, const std::string& key, const Where& w,
                                 const std::string& dflt, AutoOk auto_ok = AutoOk::No);
// A string or a list of strings.
std::vector<std::string> read_string_list(const nlohmann::json& obj, const std::string& key, const Where& w);

// Single values (the readers above use these); `w` names the value itself.
int64_t to_int(const nlohmann::json& v, const Where& w);
double to_number(const nlohmann::json& v, const Where& w);
bool to_bool(const nlohmann::json& v, const Where& w);

}  // namespace zt::config
