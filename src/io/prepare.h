// Pre-tokenizing a corpus into token shards (`zerotrain prepare`): text, JSON Lines, Arrow
// IPC, save_to_disk folders or Parquet (io/document_source.h) -> out/train_000000.bin ... and out/val_000000.bin ...
// (the zerotrain shard format of io/token_dataset.h).
//
// Every document is preceded by the EOS id (as llm.c's fineweb.py does), so documents are
// separated and the first one starts fresh. Document i goes to validation when
// floor((i+1) * f) > floor(i * f) for val_fraction f: an exact, deterministic share spread
// over the corpus. Documents are tokenized in parallel (OpenMP over documents) in chunks
// and appended in input order, so the output does not depend on the thread count. Shards
// are cut at exactly shard_size tokens (a document may span two shards). The output
// directory is written atomically (io/staging_dir.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/sft_record.h"

namespace zt::io {

class Tokenizer;

enum class Progress { Auto, Never };  // Auto: a bar on a terminal, else a line every interval
// A JSON Lines record that cannot be read (not JSON, no known fields, a conversation the
// template refuses): Fail = exit 2 naming file:line; Skip = count it, warn, go on.
enum class BadRecords { Fail, Skip };

struct PrepareOptions {
  std::vector<std::string> inputs;  // text, JSONL, Arrow or Parquet files, or directories (io/document_source.h)
  std::string output_dir;
  std::string jsonl_field = "text";  // the JSONL field / Arrow or Parquet column holding the document
  std::string field_option = "--field NAME";  // how the user sets it, for errors (io/document_source.h)
  int64_t shard_size = 100'000'000;  // tokens per shard
  double val_fraction = 0.0;         // share of documents for validation, in [0, 1)
  int64_t eos_id = -2;               // -2: the tokenizer's EOS; -1: no separator; else this id
  Progress progress = Progress::Auto;
  double progress_interval_s = 10.0;  // between lines when stderr is not a terminal
  // Supervised fine-tuning records (io/sft_record.h): the chat template (a built-in name or
  // a file; "" = the tokenizer's) and how the user names it, for errors.
  std::string chat_template;
  std::string chat_template_option = "--chat-template";
  BadRecords bad_records = BadRecords::Fail;
  // > 0: each training SFT sample is checked as cut to this many tokens (a training run's
  // padded windows, seq_len + 1): PrepareSummary::untrained names the records left without
  // a target.
  int64_t sft_window = 0;
};

struct PrepareSummary {
  int64_t documents = 0;
  int64_t train_documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t bytes = 0;  // input text bytes
  double seconds = 0;
  std::vector<std::string> shards;  // written files, final paths
  bool sft = false;                 // SFT records: version 2 shards with a loss mask and samples
  int64_t skipped_records = 0;      // with BadRecords::Skip
  int64_t kinds[4] = {0, 0, 0, 0};  // records per io::RecordKind (SFT)
  std::string chat_template;        // the template's origin, when a conversation used one
  UntrainedSamples untrained;       // with sft_window: the training samples' check
  double mb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0; }
};

// Expands inputs into data files (io/document_source.h's list_document_files).
std::vector<std::string> list_prepare_inputs(const std::vector<std::string>& inputs);

// Throws BadInput naming the file (and line, for JSONL) on malformed input; nothing is
// written then. JSONL files whose first record is an SFT record (io/sft_record.h) give
// version 2 shards: every sample its ids (what the template or the prompt format renders,
// then EOS for prompt/response, Alpaca and text records) and its loss mask, no separator
// before it; samples never span shards, which are cut at the first sample end at or past
// shard_size tokens.
PrepareSummary prepare_dataset(const PrepareOptions& options, const Tokenizer& tokenizer);

}  // namespace zt::io
