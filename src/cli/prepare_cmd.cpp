// zerotrain prepare: tokenize text / JSONL / Arrow / Parquet into token shards for training.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/parallel.h"
#include "io/prepare.h"
#include "io/tokenizer.h"

namespace zt::cli {
namespace {

constexpr const char* kHelp = R"(usage: zerotrain prepare --tokenizer PATH --out DIR [options] INPUT...

Tokenizes documents into token shards (DIR/train_000000.bin ..., DIR/val_000000.bin ...,
DIR/dataset.json) that `zerotrain train` reads. INPUT is a text file (one document), a
.jsonl file (one JSON object per line; the document is its --field), an Arrow IPC file
(.arrow, stream or file format), a datasets save_to_disk folder (its data files in
state.json's order) or a Parquet file (needs a build with Apache Arrow: `zerotrain
report`), one document per row of the --field column, or a directory (every file in
it, recursively, in sorted order). Formats are detected from the content; a binary file
(compressed, weights, a shard, not UTF-8) is refused, never tokenized. The EOS token precedes every document.
DIR is written atomically: it appears complete or not at all.

Supervised fine-tuning: JSONL records {"messages": [{"role", "content"}, ...]}, {"prompt",
"response"} (or "completion") and {"instruction", "input", "output"} (Alpaca) give shards
with a loss mask: only the responses (assistant turns) count in the loss. Conversations
go through the tokenizer's chat_template or --chat-template; prompt/response records are
prompt + response + EOS, Alpaca records Stanford Alpaca's prompt format, unless
--chat-template is given. See docs/formats.md.

  --tokenizer PATH       tokenizer.json, vocab.json (+ merges.txt), SentencePiece .model,
                         a directory holding one, or "bytes" (the byte-level tokenizer)
  --out DIR              output directory (replaced; files other than shards are kept)
  --field NAME           JSONL field / Arrow or Parquet column holding the text (text)
  --chat-template T      chatml, llama3, mistral, alpaca, or a Jinja file (default: the
                         tokenizer's chat_template)
  --skip-bad-records     count and skip JSONL records that cannot be read (default: exit 2
                         naming the file and line)
  --shard-size N         tokens per shard (100000000)
  --val-fraction X       share of documents for validation, in [0, 1) (0)
  --eos ID               separator id (default: the tokenizer's EOS)
  --no-eos               no separator between documents
  --threads N            tokenizer threads (default: all cores)
  --quiet                no progress on stderr
)";

int run_prepare(const Args& args) {
  io::PrepareOptions o;
  std::string tokenizer_path;
  bool quiet = false;
  ArgParser p("prepare");
  p.value("--tokenizer", [&](const std::string& v) { tokenizer_path = v; });
  p.value("--out", [&](const std::string& v) { o.output_dir = v; });
  p.value("--field", [&](const std::string& v) { o.jsonl_field = v; });
  p.value("--chat-template", [&](const std::string& v) { o.chat_template = v; });
  p.flag("--skip-bad-records", [&] { o.bad_records = io::BadRecords::Skip; });
  p.value("--shard-size", [&](const std::string& v) { o.shard_size = parse_int("--shard-size", v); });
  p.value("--val-fraction", [&](const std::string& v) { o.val_fraction = parse_double("--val-fraction", v); });
  p.value("--eos", [&](const std::string& v) {
    o.eos_id = parse_int("--eos", v);
    if (o.eos_id < 0) ZT_THROW_INPUT("--eos must be a token id >= 0 (use --no-eos for no separator)");
  });
  p.flag("--no-eos", [&] { o.eos_id = -1; });
  p.value("--threads", [&](const std::string& v) { apply_threads_flag(v); });
  p.flag("--quiet", [&] { quiet = true; });
  p.positional([&](const std::string& v) { o.inputs.push_back(v); });
  p.parse(args);
  if (tokenizer_path.empty()) ZT_THROW_INPUT("prepare: --tokenizer PATH is required (or --tokenizer bytes)");
  if (o.output_dir.empty()) ZT_THROW_INPUT("prepare: --out DIR is required");
  if (o.inputs.empty()) ZT_THROW_INPUT("prepare: give at least one input file or directory");
  o.progress = quiet ? io::Progress::Never : io::Progress::Auto;
  const auto tok = tokenizer_path == "bytes" ? io::make_byte_tokenizer() : io::load_tokenizer(tokenizer_path);
  const io::PrepareSummary s = io::prepare_dataset(o, *tok);
  std::printf(
      "prepared %lld documents, %lld tokens (train %lld, val %lld) in %zu shard(s) from %.1f MB in %.2f s "
      "(%.1f MB/s) -> %s\n",
      static_cast<long long>(s.documents), static_cast<long long>(s.train_tokens + s.val_tokens),
      static_cast<long long>(s.train_tokens), static_cast<long long>(s.val_tokens), s.shards.size(),
      static_cast<double>(s.bytes) / 1e6, s.seconds, s.mb_per_s(), o.output_dir.c_str());
  if (s.sft)
    std::printf("SFT samples with a loss mask (%lld messages, %lld prompt/response, %lld alpaca, %lld text); chat "
                "template: %s\n",
                static_cast<long long>(s.kinds[1]), static_cast<long long>(s.kinds[2]),
                static_cast<long long>(s.kinds[3]), static_cast<long long>(s.kinds[0]),
                s.chat_template.empty() ? "none" : s.chat_template.c_str());
  if (s.skipped_records > 0)
    std::printf("skipped %lld bad record(s)\n", static_cast<long long>(s.skipped_records));
  return 0;
}

const Registrar registrar{{"prepare", "tokenize text, JSONL, Arrow or Parquet into token shards for training", run_prepare, kHelp}};

}  // namespace
}  // namespace zt::cli
