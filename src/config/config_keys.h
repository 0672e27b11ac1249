// Config keys declared once: one table per config section, one row per key. Everything
// else about a key derives from its row: the known-key check and its did-you-mean, the
// alias spellings, reading and range-checking the value, "auto" resolution, where
// `zerotrain config check` says the value came from, the "accepted but has no effect
// here" warning, and the key's line in docs/configs.md (`zerotrain config keys
// --markdown`, compared with the doc by config_keys_test).
//
// Tables today: zero_optimization, activation_checkpointing, aio, fp16, bf16 and the top
// level (every key: known keys, parse, ranges, refusals, origins, docs; sections and blocks
// are rows read by their own parsers) and the run config (every key: known keys, aliases, reading, ranges,
// the field it lands in, paths, origins, docs), the optimizer params (per type) and the
// Accelerate YAML's keys (known keys, the JSON + YAML rule, docs). The scheduler params'
// table (per schedule type, with defaults the schedules read) is in scheduler_keys.h.
// Adding a key: docs/dev.md "Adding a config key".
#pragma once
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "config/config.h"
#include "config/config_value.h"

namespace zt::config {

enum class KeyType { Bool, Int, Number, Object, Any };

// The status words of docs/configs.md.
enum class KeyStatus {
  Resolved,  // carried in TrainConfig with DeepSpeed's meaning and acted on
  Accepted,  // validated, no effect here (see InertWhen for when it says so)
  Mapped,    // a deprecated spelling of another key
  Refused,   // Unsupported (exit 2) when switched on; its off value loads
};

// How an "auto" value is computed (AutoRule::None: "auto" is an error for the key).
// RunPrecision: from the run's own bf16/fp16 flags (HF TrainingArguments, Accelerate's
// mixed_precision), decided by resolve_ds_config.
// FromRun: from the run's own setting of the same meaning (per_device_train_batch_size,
// gradient_accumulation_steps, max_grad_norm), decided by resolve_ds_config.
enum class AutoRule { None, HiddenSquared, NineTenthsHiddenSquared, TenHidden, RunPrecision, FromRun };

// When a key whose value changes nothing in this run warns (inert_keys.cpp).
enum class InertWhen {
  Never,
  NotDefault,             // any value but the default
  NotDefaultBelowStage3,  // ... when the run's stage is below 3
  NotDefaultOneProcess,   // ... with one process
  WrittenTrueOneProcess,  // written (not defaulted) as true, with one process
  NotDefaultWithoutNvme,  // any value but the default, unless offload_optimizer is nvme
};

// Whether `zerotrain config check` prints the key.
enum class Shown { Always, Stage3, No };

// The field of section struct S a key fills (monostate: accepted, kept nowhere).
template <class S>
using KeyField =
    std::variant<std::monostate, bool S::*, int S::*, int64_t S::*, float S::*, double S::*, zero::OverlapComm S::*>;

// One key of a ds_config section whose values are numbers or booleans, filling a field of
// S (ZeroSection, ActivationCheckpointingSection, AioSection, Fp16Section, Bf16Section).
// Values travel as double: whole numbers up to 2^53 are exact, and every key's range
// lies far inside that.
template <class S>
struct SectionKey {
  std::string key;
  std::vector<std::string> aliases;  // DeepSpeed's older spellings (pydantic aliases)
  KeyType type;
  double default_value;      // bools as 0/1; unused for Object/Any
  std::string default_text;  // as docs/configs.md shows it
  double min_value;          // range check: a smaller value is an error (kNoMinimum: none)
  AutoRule auto_rule;
  KeyStatus status;
  KeyField<S> target;
  InertWhen inert_when;
  std::string inert_why;     // the "(why)" of the warning
  int64_t refuse_above;      // Refused: a value above this is refused
  std::string refused_what;  // Refused: the Unsupported error after "section.KEY: "
  Shown shown;
  std::string doc;  // docs/configs.md's status column
  // Range check above: a larger value is an error (kNoMaximum: none but the field's own
  // type, which read_key always enforces: an int field takes at most INT_MAX). Set on the
  // rows whose values size allocations or are multiplied together (aio, offload); the doc
  // cell then says "at most N".
  double max_value = 1e300;
  std::string max_why;  // why the bound ("" = none said)
};

constexpr double kNoMinimum = -1e300;
constexpr double kNoMaximum = 1e300;

// A row with an upper bound (set after key_row).
template <class S>
SectionKey<S> at_most(SectionKey<S> k, double max_value, std::string why) {
  k.max_value = max_value;
  k.max_why = std::move(why);
  return k;
}

// The range the field behind a key can hold: a value outside it would wrap or be
// undefined when stored (an int field given 2^40), so read_key refuses it whatever the
// row's own range says.
template <class S>
std::pair<double, double> field_range(const KeyField<S>& target) {
  if (std::holds_alternative<int S::*>(target)) return {INT_MIN, INT_MAX};
  if (std::holds_alternative<int64_t S::*>(target)) return {-9.2233720368547758e18, 9.2233720368547758e18};
  return {kNoMinimum, kNoMaximum};
}

// A row with no warning, no refusal and not printed by `config check` (set those fields
// after, where a key has them): what most rows of the tables are.
template <class S>
SectionKey<S> key_row(std::string key, std::vector<std::string> aliases, KeyType type, double dflt,
                      std::string dflt_text, double min_value, AutoRule auto_rule, KeyStatus status, KeyField<S> target,
                      std::string doc) {
  return {std::move(key),
          std::move(aliases),
          type,
          dflt,
          std::move(dflt_text),
          min_value,
          auto_rule,
          status,
          target,
          InertWhen::Never,
          "",
          0,
          "",
          Shown::No,
          std::move(doc),
          kNoMaximum,
          ""};
}

using ZeroKey = SectionKey<ZeroSection>;
using CheckpointingKey = SectionKey<ActivationCheckpointingSection>;
using AioKey = SectionKey<AioSection>;
using Fp16Key = SectionKey<Fp16Section>;
using Bf16Key = SectionKey<Bf16Section>;
using TopKey = SectionKey<DsTopLevel>;

// An optimizer param: its row, and the optimizer types that take it (another type's
// params block naming it is an unknown-key error).
struct OptimizerParamKey {
  SectionKey<OptimizerParams> row;
  std::vector<zero::OptimizerType> types;
  bool takes(zero::OptimizerType t) const;
};

// "zero_optimization" (config_keys_zero.cpp), "activation_checkpointing"
// (config_keys_checkpointing.cpp), "aio" (config_keys_aio.cpp), "fp16" and "bf16"
// (config_keys_precision.cpp).
const std::vector<ZeroKey>& zero_keys();
const std::vector<CheckpointingKey>& checkpointing_keys();
const std::vector<AioKey>& aio_keys();
const std::vector<Fp16Key>& fp16_keys();
const std::vector<Bf16Key>& bf16_keys();
// The top level (config_keys_top.cpp): its scalars, and a row (Object / Any, read by their
// own parsers) for each section and block, so the known-key check and the doc come from
// the table too.
const std::vector<TopKey>& top_level_keys();
// "optimizer.params" (config_keys_optimizer.cpp).
const std::vector<OptimizerParamKey>& optimizer_param_keys();
std::vector<std::string> optimizer_param_spellings(zero::OptimizerType type);

// Every spelling a section accepts (keys and aliases), for the known-key check.
template <class S>
std::vector<std::string> key_spellings(const std::vector<SectionKey<S>>& keys) {
  std::vector<std::string> all;
  for (const SectionKey<S>& k : keys) {
    all.push_back(k.key);
    all.insert(all.end(), k.aliases.begin(), k.aliases.end());
  }
  return all;
}

// A whole-number key's value from its double: saturating, so that DeepSpeed's sys.maxsize
// defaults (INT64_MAX, which a double rounds up to 2^63) come back as INT64_MAX.
inline int64_t saturating_int64(double v) {
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

// A key's value in the resolved section (bools 0/1; the default when the key is kept
// nowhere), and the other way.
//
// GCC's -Warray-bounds cannot see that a section's table never holds a member pointer of
// a type the section lacks (an int64_t one for the all-bool Bf16Section), and warns on
// that visitor branch; it is never taken.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
template <class S>
double key_value(const SectionKey<S>& k, const S& s) {
  struct Get {
    const SectionKey<S>& k;
    const S& s;
    double operator()(std::monostate) const { return k.default_value; }
    double operator()(bool S::*f) const { return s.*f ? 1 : 0; }
    double operator()(int S::*f) const { return s.*f; }
    double operator()(int64_t S::*f) const { return static_cast<double>(s.*f); }
    double operator()(float S::*f) const { return s.*f; }
    double operator()(double S::*f) const { return s.*f; }
    double operator()(zero::OverlapComm S::*f) const { return s.*f == zero::OverlapComm::On ? 1 : 0; }
  };
  return std::visit(Get{k, s}, k.target);
}

template <class S>
void set_key_value(const SectionKey<S>& k, double v, S& s) {
  struct Put {
    double v;
    S& s;
    void operator()(std::monostate) const {}
    void operator()(bool S::*f) const { s.*f = v != 0; }
    void operator()(int S::*f) const { s.*f = static_cast<int>(v); }
    void operator()(int64_t S::*f) const { s.*f = saturating_int64(v); }
    void operator()(float S::*f) const { s.*f = static_cast<float>(v); }
    void operator()(double S::*f) const { s.*f = v; }
    void operator()(zero::OverlapComm S::*f) const { s.*f = v != 0 ? zero::OverlapComm::On : zero::OverlapComm::Off; }
  };
  std::visit(Put{v, s}, k.target);
}
#pragma GCC diagnostic pop

// A key's value as `config check` and the docs write it: true/false, a whole number, or
// a number in its shortest form.
template <class S>
std::string key_value_text(const SectionKey<S>& k, double v) {
  if (k.type == KeyType::Bool) return v != 0 ? "true" : "false";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A value in a range error or a bound in the docs: whole-number keys in full (4294967297,
// not 4.2949673e+09), others as key_value_text writes them.
template <class S>
std::string key_bound_text(const SectionKey<S>& k, double v) {
  if (k.type == KeyType::Int && std::fabs(v) < 9.2233720368547758e18) return std::to_string(static_cast<int64_t>(v));
  return key_value_text(k, v);
}

// What an "auto" key resolves to for a model of hidden size h.
int64_t auto_value(AutoRule rule, int64_t h);
std::string auto_rule_text(AutoRule rule);

struct RunConfig;  // config/run_config.h

// Where a run-config key's value lands: a field of the resolved TrainConfig (or of its
// model/data sections) that the run config sets as it is, or a field of RunConfig for the
// values that meet the other documents' first (batch sizes, optimizer and schedule,
// precision, device, file paths; a Setting remembers whether the key was written).
// monostate: read by its section's own parser (lora:, the trackers' keys). The reader
// follows from the field's type: bool, integer, number, word or list of words; an enum
// field takes the row's `choices` in the enum's order (OutputDirOverwrite: a bool).
using RunTarget =
    std::variant<std::monostate, bool TrainConfig::*, int TrainConfig::*, int64_t TrainConfig::*,
                 uint64_t TrainConfig::*, float TrainConfig::*, double TrainConfig::*, std::string TrainConfig::*,
                 std::vector<std::string> TrainConfig::*, CheckpointSaves TrainConfig::*, Evaluations TrainConfig::*,
                 OutputDirOverwrite TrainConfig::*, std::optional<uint64_t> TrainConfig::*, bool ModelSection::*,
                 std::string ModelSection::*, bool DataSection::*, int64_t DataSection::*, double DataSection::*,
                 std::string DataSection::*, std::vector<std::string> DataSection::*, Setting<bool> RunConfig::*,
                 Setting<int64_t> RunConfig::*, Setting<double> RunConfig::*, Setting<std::string> RunConfig::*,
                 std::string RunConfig::*>;

// A value as read, for a row's range check.
struct RunValue {
  bool written = false;
  int64_t integer = 0;  // integer keys
  double number = 0;    // number keys (and integer ones, converted)
  std::string word;     // word keys
};
// A row's range check: throws BadInput (or Unsupported) naming `section.key(name)`.
using RunCheck = void (*)(const RunValue& value, const Where& section, const std::string& name);

// Whether a key's value is a file path: relative to the run file when written there, to the
// current directory on the command line (config_paths.h). ChatTemplate: unless a built-in
// template's name.
enum class RunPath { No, Yes, ChatTemplate };

// A run-config key (dotted for sections: "model.tokenizer").
struct RunKey {
  std::string key;
  // HF TrainingArguments spellings: top level ("save_steps") or in the key's section
  // ("model.name_or_path").
  std::vector<std::string> aliases;
  std::string default_text;
  // The name `config check` prints it under ("" = the key itself; model.preset and
  // model.path are both "model"). The HF keys that feed ds_config "auto" values
  // (learning_rate, per_device_train_batch_size, ...) keep their own names: the ds keys
  // they resolve record "auto (learning_rate)" and the like.
  std::string origin_key;
  std::string doc;
  RunTarget target{};
  nlohmann::json default_value{};      // what lands when the key is not written
  RunCheck check = nullptr;            // the value's range (nullptr: the type's alone)
  std::vector<std::string> choices{};  // a word key's values
  RunPath path = RunPath::No;
  AutoOk auto_ok = AutoOk::No;  // "auto" is a value (it lands as the word "auto")
};

const std::vector<RunKey>& run_keys();

// An Accelerate YAML key (config_keys_accelerate.cpp): the known-key check, the JSON + YAML
// rule and the doc tables come from the rows; values are read in accelerate_config.cpp.
struct AccelerateKey {
  std::string key;
  std::string default_text;
  std::string maps_to;  // deepspeed_config keys: the ds_config setting it becomes ("" = none)
  bool ds_setting;      // a DeepSpeed setting: refused beside a DeepSpeed JSON file
  std::string doc;
};
// The YAML's top level, and the keys of its deepspeed_config block (inline ds_config
// sections are allowed there too).
const std::vector<AccelerateKey>& accelerate_keys();
const std::vector<AccelerateKey>& accelerate_deepspeed_keys();
std::vector<std::string> accelerate_key_names(const std::vector<AccelerateKey>& keys);
// The run config's top-level spellings (sections, keys, aliases).
std::vector<std::string> run_top_level_spellings();
// The keys a run-config section ("model", "data", "samples") accepts.
std::vector<std::string> run_section_keys(const std::string& section);
// The canonical key for a spelling ("save_steps" -> "save_interval"; itself otherwise).
std::string canonical_run_key(const std::string& spelling);
// The name a run key's origin is recorded under ("model.path" -> "model").
std::string run_origin_key(const std::string& canonical);

// docs/configs.md tables, generated from the rows.
std::string zero_keys_markdown();
std::string checkpointing_keys_markdown();
std::string aio_keys_markdown();
std::string fp16_keys_markdown();
std::string bf16_keys_markdown();
std::string top_level_keys_markdown();
std::string optimizer_param_keys_markdown();
std::string run_keys_markdown();
std::string accelerate_keys_markdown();
std::string accelerate_deepspeed_keys_markdown();

}  // namespace zt::config
