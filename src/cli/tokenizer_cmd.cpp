// zerotrain tokenizer encode|decode|train: inspect and build tokenizers from the shell.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "io/bpe_trainer.h"
#include "io/byte_tokenizer.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain tokenizer <action> [options]

  encode --tokenizer PATH [--text TEXT | FILE] [--special]
      prints the token ids, space-separated, on one line
      --special     add the post-processor's special tokens (BOS, ...)
  decode --tokenizer PATH [--ids "1 2 3" | FILE] [--skip-special]
      prints the text
  train --vocab-size N [--out tokenizer.json] [--min-frequency N] FILE...
      trains a byte-level BPE (GPT-2 pre-tokenizer, <|endoftext|> special) on the files

PATH is a tokenizer.json, a vocab.json (merges.txt beside it), a SentencePiece .model,
or a directory holding one of them.
)";

int run_encode(const Args& args) {
  std::string tokenizer, text, file;
  bool have_text = false;
  io::SpecialTokens specials = io::SpecialTokens::Skip;
  ArgParser p("tokenizer encode");
  p.value("--tokenizer", [&](const std::string& v) { tokenizer = v; });
  p.value("--text", [&](const std::string& v) {
    text = v;
    have_text = true;
  });
  p.flag("--special", [&] { specials = io::SpecialTokens::Add; });
  p.positional([&](const std::string& v) {
    if (!file.empty()) ZT_THROW_INPUT("tokenizer encode: one input FILE at most (got '", file, "' and '", v, "')");
    file = v;
  });
  p.parse(args);
  if (tokenizer.empty()) ZT_THROW_INPUT("tokenizer encode: --tokenizer PATH is required");
  if (have_text == !file.empty()) ZT_THROW_INPUT("tokenizer encode: give exactly one of --text TEXT or FILE");
  if (!file.empty()) text = io::read_text_file(file);
  const auto tok = io::load_tokenizer(tokenizer);
  const std::vector<int32_t> ids = tok->encode(text, specials);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line.push_back(' ');
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_decode(const Args& args) {
  std::string tokenizer, ids_text, file;
  bool have_ids = false, skip_special = false;
  ArgParser p("tokenizer decode");
  p.value("--tokenizer", [&](const std::string& v) { tokenizer = v; });
  p.value("--ids", [&](const std::string& v) {
    ids_text = v;
    have_ids = true;
  });
  p.flag("--skip-special", [&] { skip_special = true; });
  p.positional([&](const std::string& v) {
    if (!file.empty()) ZT_THROW_INPUT("tokenizer decode: one input FILE at most");
    file = v;
  });
  p.parse(args);
  if (tokenizer.empty()) ZT_THROW_INPUT("tokenizer decode: --tokenizer PATH is required");
  if (have_ids == !file.empty()) ZT_THROW_INPUT("tokenizer decode: give exactly one of --ids \"1 2 3\" or FILE");
  if (!file.empty()) ids_text = io::read_text_file(file);
  std::vector<int32_t> ids;
  std::istringstream in(ids_text);
  std::string word;
  while (in >> word) ids.push_back(static_cast<int32_t>(parse_int("--ids", word)));
  const auto tok = io::load_tokenizer(tokenizer);
  const std::string text = tok->decode(ids, skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

int run_train(const Args& args) {
  io::BpeTrainOptions o;
  std::string out = "tokenizer.json";
  std::vector<std::string> files;
  ArgParser p("tokenizer train");
  p.value("--vocab-size", [&](const std::string& v) { o.vocab_size = parse_int("--vocab-size", v); });
  p.value("--min-frequency", [&](const std::string& v) { o.min_frequency = parse_int("--min-frequency", v); });
  p.value("--out", [&](const std::string& v) { out = v; });
  p.positional([&](const std::string& v) { files.push_back(v); });
  p.parse(args);
  if (files.empty()) ZT_THROW_INPUT("tokenizer train: give the training text FILEs");
  std::vector<std::string> texts;
  for (const std::string& f : files) texts.push_back(io::read_text_file(f));
  const std::string json = io::train_bpe_tokenizer_json(texts, o);
  io::write_file_atomic(out, [&](std::FILE* f) {
    if (std::fwrite(json.data(), 1, json.size(), f) != json.size()) ZT_THROW_IO("cannot write ", out);
  });
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

int run_tokenizer(const Args& args) {
  if (args.empty() || wants_help(args)) {
    std::printf("%s", kHelp);
    return args.empty() ? 2 : 0;
  }
  const Args rest(args.begin() + 1, args.end());
  if (args[0] == "encode") return run_encode(rest);
  if (args[0] == "decode") return run_decode(rest);
  if (args[0] == "train") return run_train(rest);
  const std::string guess = closest(args[0], {"encode", "decode", "train"});
  ZT_THROW_INPUT("tokenizer: unknown action '", args[0], "'", guess.empty() ? "" : "; did you mean '" + guess + "'?",
                 " (encode, decode, train)");
}

const Registrar registrar{
    {"tokenizer", "encode/decode text with a tokenizer, or train a byte-level BPE", run_tokenizer, kHelp}};

}  // namespace
}  // namespace zt::cli
