// Pieces of ds_config parsing split by section (one file each); internal to train/.
#pragma once
#include <algorithm>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "config/config_keys.h"
#include "config/config_value.h"
#include "config/ds_config.h"

namespace zt::config::detail {

// Moves every alias spelling of `keys` in section object `obj` to its key; `both_given`
// throws the section's error for an alias written together with its key.
template <class S, class BothGiven>
void move_aliases(const std::vector<SectionKey<S>>& keys, nlohmann::json& obj, BothGiven both_given) {
  for (const SectionKey<S>& k : keys) {
    for (const std::string& alias : k.aliases) {
      if (!obj.contains(alias)) continue;
      if (obj.contains(k.key)) both_given(alias, k.key);
      obj[k.key] = obj[alias];
      obj.erase(alias);
    }
  }
}

// One table row's value from section object `obj`: type, "auto", range and refusal
// checks, then into its field of `section`; `given` records how it was written.
template <class S>
void read_key(const SectionKey<S>& k, const nlohmann::json& obj, const Where& w, S& section,
              std::map<std::string, Given>& given) {
  if (k.type == KeyType::Object) return;  // a sub-dict with its own parser
  if (k.type == KeyType::Any) {
    const bool set = obj.contains(k.key) && !obj[k.key].is_null();
    if (k.status == KeyStatus::Refused && set) ZT_THROW_UNSUPPORTED(w.key(k.key).str(), ": ", k.refused_what);
    given[k.key] = set ? Given::Set : Given::Absent;
    return;
  }
  const AutoOk auto_ok = k.auto_rule == AutoRule::None ? AutoOk::No : AutoOk::Yes;
  Setting<double> s;
  if (k.type == KeyType::Bool) {
    const Setting<bool> b = read_bool(obj, k.key, w, k.default_value != 0, auto_ok);
    s = Setting<double>(b.given, b.value ? 1 : 0);
  } else if (k.type == KeyType::Int) {
    const Setting<int64_t> i = read_int(obj, k.key, w, saturating_int64(k.default_value), auto_ok);
    s = Setting<double>(i.given, static_cast<double>(i.value));
  } else {
    s = read_number(obj, k.key, w, k.default_value, auto_ok);
  }
  if (s.is_set() && s.value < k.min_value)
    ZT_THROW_INPUT(w.key(k.key).str(), k.min_value > 0 ? ": must be positive" : ": must not be negative");
  // Before the value reaches its field or any arithmetic: the row's bound, and what the
  // field can hold (a saturated int64 keeps DeepSpeed's sys.maxsize defaults).
  const auto [field_min, field_max] = field_range(k.target);
  const double max = std::min(k.max_value, field_max);
  if (s.is_set() && s.value > max)
    ZT_THROW_INPUT(w.key(k.key).str(), ": ", key_bound_text(k, s.value), " is too large; it must be at most ",
                   key_bound_text(k, max), k.max_why.empty() ? "" : " (" + k.max_why + ")");
  if (s.is_set() && s.value < field_min)
    ZT_THROW_INPUT(w.key(k.key).str(), ": ", key_bound_text(k, s.value), " is too small; it must be at least ",
                   key_bound_text(k, field_min));
  if (k.status == KeyStatus::Refused && s.value > static_cast<double>(k.refuse_above))
    ZT_THROW_UNSUPPORTED(w.key(k.key).str(), ": ", k.refused_what);
  given[k.key] = s.given;
  if (!s.is_auto()) set_key_value(k, s.value, section);
}

// "zero_optimization" (ds_config_zero.cpp).
void parse_zero_section(const nlohmann::json& doc, const Where& top, DsConfig& ds);

}  // namespace zt::config::detail
