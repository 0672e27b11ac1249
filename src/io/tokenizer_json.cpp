// HF tokenizer.json -> BpeSpec. Every malformed or unsupported field is an error naming
// the file and the key.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer_bpe.h"
#include "io/tokenizer_load.h"

namespace zt::io {
namespace {

using nlohmann::json;

const char* type_name(const json& j) { return j.type_name(); }

const json& need(const json& obj, const char* key, const std::string& ctx) {
  auto it = obj.find(key);
  if (it == obj.end()) ZT_THROW_INPUT(ctx, ": missing key '", key, "'");
  return *it;
}

bool get_bool(const json& obj, const char* key, bool fallback, const std::string& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) ZT_THROW_INPUT(ctx, ".", key, ": expected true/false, got ", type_name(*it));
  return it->get<bool>();
}

std::string get_string(const json& obj, const char* key, const std::string& ctx) {
  const json& v = need(obj, key, ctx);
  if (!v.is_string()) ZT_THROW_INPUT(ctx, ".", key, ": expected a string, got ", type_name(v));
  return v.get<std::string>();
}

std::optional<std::string> get_opt_string(const json& obj, const char* key, const std::string& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) ZT_THROW_INPUT(ctx, ".", key, ": expected a string or null, got ", type_name(*it));
  return it->get<std::string>();
}

int32_t get_id(const json& v, const std::string& ctx) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    ZT_THROW_INPUT(ctx, ": expected a non-negative integer id, got ", v.dump());
  return static_cast<int32_t>(v.get<int64_t>());
}

std::string type_of(const json& obj, const std::string& ctx) {
  if (!obj.is_object()) ZT_THROW_INPUT(ctx, ": expected an object, got ", type_name(obj));
  return get_string(obj, "type", ctx);
}

void parse_model(const json& model, const std::string& ctx, BpeSpec& spec) {
  if (!model.is_object()) ZT_THROW_INPUT(ctx, ": expected an object, got ", type_name(model));
  auto t = model.find("type");
  if (t != model.end() && !(t->is_string() && t->get<std::string>() == "BPE"))
    ZT_THROW_UNSUPPORTED(ctx, ".type is ", t->dump(),
                         "; zerotrain reads BPE tokenizer.json files "
                         "(for SentencePiece models pass the tokenizer.model file)");
  const json& vocab = need(model, "vocab", ctx);
  if (!vocab.is_object()) ZT_THROW_INPUT(ctx, ".vocab: expected an object {token: id}, got ", type_name(vocab));
  spec.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    spec.vocab.emplace_back(it.key(), get_id(it.value(), ctx + ".vocab['" + it.key() + "']"));
  const json& merges = need(model, "merges", ctx);
  if (!merges.is_array()) ZT_THROW_INPUT(ctx, ".merges: expected a list, got ", type_name(merges));
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string mctx = str(ctx, ".merges[", i, "]");
    if (m.is_string()) {
      // Older spelling "a b": the two tokens around the one space.
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
        ZT_THROW_INPUT(mctx, ": '", s, "' is not two tokens separated by one space");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      ZT_THROW_INPUT(mctx, ": expected \"a b\" or [\"a\", \"b\"], got ", m.dump());
    }
  }
  spec.options.unk_token = get_opt_string(model, "unk_token", ctx);
  spec.options.fuse_unk = get_bool(model, "fuse_unk", false, ctx);
  spec.options.byte_fallback = get_bool(model, "byte_fallback", false, ctx) ? ByteFallback::Yes : ByteFallback::No;
  spec.options.ignore_merges = get_bool(model, "ignore_merges", false, ctx) ? IgnoreMerges::Yes : IgnoreMerges::No;
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto v = get_opt_string(model, key, ctx);
    if (v && !v->empty()) ZT_THROW_UNSUPPORTED(ctx, ".", key, " = '", *v, "' is not supported (only null or \"\")");
  }
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
    ZT_THROW_UNSUPPORTED(ctx, ".dropout = ", dropout->dump(), ": BPE dropout is not supported; set it to null");
}

SplitBehavior parse_behavior(const std::string& s, const std::string& ctx) {
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  ZT_THROW_INPUT(ctx, ".behavior '", s,
                 "' is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous");
}

void parse_pre_tokenizer(const json& p, const std::string& ctx, BpeSpec& spec, bool& byte_level) {
  if (p.is_null()) return;
  const std::string type = type_of(p, ctx);
  if (type == "Sequence") {
    const json& list = need(p, "pretokenizers", ctx);
    if (!list.is_array()) ZT_THROW_INPUT(ctx, ".pretokenizers: expected a list, got ", type_name(list));
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(list[i], str(ctx, ".pretokenizers[", i, "]"), spec, byte_level);
    return;
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    byte_level = true;
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    step.prefix_space = get_bool(p, "add_prefix_space", true, ctx) ? PrefixSpace::Yes : PrefixSpace::No;
    step.use_regex = get_bool(p, "use_regex", true, ctx) ? UseRegex::Yes : UseRegex::No;
  } else if (type == "Split") {
    const json& pattern = need(p, "pattern", ctx);
    if (!pattern.is_object()) ZT_THROW_INPUT(ctx, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    if (pattern.contains("Regex")) {
      step.matcher = make_regex_matcher(get_string(pattern, "Regex", ctx + ".pattern"), ctx + ".pattern.Regex");
    } else if (pattern.contains("String")) {
      step.matcher = make_literal_matcher(get_string(pattern, "String", ctx + ".pattern"));
    } else {
      ZT_THROW_INPUT(ctx, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}, got ", pattern.dump());
    }
    step.behavior = parse_behavior(get_string(p, "behavior", ctx), ctx);
    step.invert = get_bool(p, "invert", false, ctx) ? Invert::Yes : Invert::No;
  } else {
    ZT_THROW_UNSUPPORTED(ctx, ".type '", type, "' is not supported (ByteLevel, Split, Sequence are)");
  }
  spec.pre_tokenizer.push_back(std::move(step));
}

void parse_normalizer(const json& n, const std::string& ctx, BpeSpec& spec) {
  if (n.is_null()) return;
  const std::string type = type_of(n, ctx);
  if (type == "Sequence") {
    const json& list = need(n, "normalizers", ctx);
    if (!list.is_array()) ZT_THROW_INPUT(ctx, ".normalizers: expected a list, got ", type_name(list));
    for (size_t i = 0; i < list.size(); ++i) parse_normalizer(list[i], str(ctx, ".normalizers[", i, "]"), spec);
  } else if (type == "Prepend") {
    spec.normalizer_prepend = get_string(n, "prepend", ctx);
  } else if (type == "Replace") {
    const json& pattern = need(n, "pattern", ctx);
    if (!pattern.is_object() || !pattern.contains("String"))
      ZT_THROW_UNSUPPORTED(ctx, ".pattern: only {\"String\": ...} replacements are supported, got ", pattern.dump());
    spec.normalizer_replace.emplace_back(get_string(pattern, "String", ctx + ".pattern"),
                                         get_string(n, "content", ctx));
  } else {
    ZT_THROW_UNSUPPORTED(ctx, ".type '", type, "' is not supported (null, Prepend, Replace, Sequence are)");
  }
}

void parse_decoder(const json& d, const std::string& ctx, BpeSpec& spec) {
  if (d.is_null()) {
    spec.decoder = DecoderKind::None;
    return;
  }
  const std::string type = type_of(d, ctx);
  if (type == "ByteLevel") {
    spec.decoder = DecoderKind::ByteLevel;
    return;
  }
  if (type == "Sequence") {
    // Llama-2/Mistral conversions: Replace('▁', ' '), ByteFallback, Fuse, Strip(' ', 1, 0).
    const json& list = need(d, "decoders", ctx);
    std::string types;
    if (list.is_array())
      for (const json& e : list)
        types +=
            (e.is_object() && e.contains("type") && e["type"].is_string() ? e["type"].get<std::string>() : "?") + ",";
    if (types == "Replace,ByteFallback,Fuse,Strip," || types == "Replace,ByteFallback,Fuse,") {
      spec.decoder = DecoderKind::SentencePiece;
      return;
    }
    if (types == "ByteLevel,") {
      spec.decoder = DecoderKind::ByteLevel;
      return;
    }
    ZT_THROW_UNSUPPORTED(ctx, ": decoder sequence [", types, "] is not supported");
  }
  ZT_THROW_UNSUPPORTED(ctx, ".type '", type, "' is not supported (ByteLevel, or SentencePiece-style Sequence)");
}

// Special-token ids of the single-sequence template: ids before and after "A".
void parse_post_processor(const json& p, const std::string& ctx, BpeSpec& spec) {
  if (p.is_null()) return;
  const std::string type = type_of(p, ctx);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const json& list = need(p, "processors", ctx);
    if (!list.is_array()) ZT_THROW_INPUT(ctx, ".processors: expected a list, got ", type_name(list));
    for (size_t i = 0; i < list.size(); ++i) parse_post_processor(list[i], str(ctx, ".processors[", i, "]"), spec);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const json& v = need(p, key, ctx);
      if (!v.is_array() || v.size() != 2 || !v[0].is_string())
        ZT_THROW_INPUT(ctx, ".", key, ": expected [token, id], got ", v.dump());
      (std::string(key) == "cls" ? spec.post_prefix : spec.post_suffix).push_back(get_id(v[1], ctx + "." + key));
    }
    return;
  }
  if (type != "TemplateProcessing")
    ZT_THROW_UNSUPPORTED(ctx, ".type '", type,
                         "' is not supported (TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing)");
  const json& single = need(p, "single", ctx);
  const json& specials = need(p, "special_tokens", ctx);
  if (!single.is_array()) ZT_THROW_INPUT(ctx, ".single: expected a list, got ", type_name(single));
  if (!specials.is_object()) ZT_THROW_INPUT(ctx, ".special_tokens: expected an object, got ", type_name(specials));
  bool after = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const json& item = single[i];
    const std::string ictx = str(ctx, ".single[", i, "]");
    if (item.is_object() && item.contains("Sequence")) {
      after = true;
    } else if (item.is_object() && item.contains("SpecialToken")) {
      const std::string name = get_string(item["SpecialToken"], "id", ictx + ".SpecialToken");
      auto it = specials.find(name);
      if (it == specials.end()) ZT_THROW_INPUT(ictx, ": special token '", name, "' is not in ", ctx, ".special_tokens");
      const json& ids = need(*it, "ids", ctx + ".special_tokens['" + name + "']");
      if (!ids.is_array()) ZT_THROW_INPUT(ctx, ".special_tokens['", name, "'].ids: expected a list");
      for (const json& id : ids) (after ? spec.post_suffix : spec.post_prefix).push_back(get_id(id, ictx));
    } else {
      ZT_THROW_INPUT(ictx, ": expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, got ", item.dump());
    }
  }
}

void parse_added(const json& list, const std::string& ctx, BpeSpec& spec) {
  if (list.is_null()) return;
  if (!list.is_array()) ZT_THROW_INPUT(ctx, ": expected a list, got ", type_name(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const json& a = list[i];
    const std::string actx = str(ctx, "[", i, "]");
    if (!a.is_object()) ZT_THROW_INPUT(actx, ": expected an object, got ", type_name(a));
    AddedToken t;
    t.id = get_id(need(a, "id", actx), actx + ".id");
    t.content = get_string(a, "content", actx);
    t.special = get_bool(a, "special", false, actx);
    t.lstrip = get_bool(a, "lstrip", false, actx);
    t.rstrip = get_bool(a, "rstrip", false, actx);
    t.single_word = get_bool(a, "single_word", false, actx);
    t.normalized = get_bool(a, "normalized", !t.special, actx);
    spec.added.push_back(std::move(t));
  }
}

}  // namespace

BpeSpec parse_tokenizer_json(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    ZT_THROW_INPUT(path, ": not valid JSON (", e.what(),
                   "); a HF tokenizer.json is expected "
                   "(re-save it with tokenizer.save() or re-download it)");
  }
  if (!j.is_object()) ZT_THROW_INPUT(path, ": expected a JSON object, got ", type_name(j));
  BpeSpec spec;
  spec.where = path;
  auto model = j.find("model");
  if (model == j.end() || model->is_null())
    ZT_THROW_INPUT(path, ": no 'model' object; a HF tokenizer.json has model {type: BPE, vocab, merges}");
  parse_model(*model, path + ": model", spec);
  bool byte_level = false;
  if (j.contains("normalizer")) parse_normalizer(j["normalizer"], path + ": normalizer", spec);
  if (j.contains("pre_tokenizer")) parse_pre_tokenizer(j["pre_tokenizer"], path + ": pre_tokenizer", spec, byte_level);
  spec.decoder = DecoderKind::None;
  if (j.contains("decoder")) parse_decoder(j["decoder"], path + ": decoder", spec);
  if (j.contains("post_processor")) parse_post_processor(j["post_processor"], path + ": post_processor", spec);
  if (j.contains("added_tokens")) parse_added(j["added_tokens"], path + ": added_tokens", spec);
  if (byte_level && spec.decoder == DecoderKind::SentencePiece)
    ZT_THROW_UNSUPPORTED(path, ": a ByteLevel pre-tokenizer with a SentencePiece decoder is not supported");
  spec.options.alphabet = byte_level ? Alphabet::Bytes : Alphabet::Chars;
  if (!spec.post_prefix.empty()) {
    const int32_t id = spec.post_prefix.front();
    for (const AddedToken& t : spec.added)
      if (t.id == id) spec.bos_token = t.content;
    for (const auto& [tok, vid] : spec.vocab)
      if (vid == id && spec.bos_token.empty()) spec.bos_token = tok;
  }
  return spec;
}

}  // namespace zt::io
