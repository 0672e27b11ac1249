#include "io/prepare.h"
#include "core/strings.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/document_source.h"
#include "io/safetensors.h"
#include "io/sft_record.h"
#include "io/staging_dir.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"

namespace zt::io {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// Streams documents from the input files in order (io/document_source.h).
class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, DocumentOptions options)
      : files_(std::move(files)), options_(std::move(options)) {}

  // Appends up to about `max_bytes` of documents; false when the input is exhausted.
  // `bytes_read`: the input files' bytes consumed so far.
  bool next_chunk(std::vector<DocumentRecord>& docs, size_t max_bytes, int64_t& bytes_read) {
    docs.clear();
    size_t bytes = 0;
    DocumentRecord doc;
    while (bytes < max_bytes && docs.size() < 65536) {
      if (!source_) {
        if (next_file_ >= files_.size()) break;
        source_ = open_document_source(files_[next_file_++], options_);
      }
      if (!source_->next_record(doc)) {
        finished_bytes_ += source_->bytes_done();
        source_.reset();
        continue;
      }
      bytes += doc.text.size();
      if (!doc.text.empty()) docs.push_back(std::move(doc));
    }
    bytes_read = finished_bytes_ + (source_ ? source_->bytes_done() : 0);
    return !docs.empty() || next_file_ < files_.size() || source_;
  }

 private:
  std::vector<std::string> files_;
  DocumentOptions options_;
  size_t next_file_ = 0;
  std::unique_ptr<DocumentSource> source_;
  int64_t finished_bytes_ = 0;
};

// Collects one split's tokens and writes a shard every `shard_size` tokens.
class ShardSink {
 public:
  ShardSink(std::string prefix, const StagingDir& dir, int64_t shard_size, int64_t vocab, int64_t eos)
      : prefix_(std::move(prefix)), dir_(dir), shard_size_(shard_size), vocab_(vocab), eos_(eos) {}
  void append(const std::vector<int32_t>& ids) {
    size_t i = 0;
    while (i < ids.size()) {
      const size_t room = static_cast<size_t>(shard_size_) - buffer_.size();
      const size_t n = std::min(room, ids.size() - i);
      buffer_.insert(buffer_.end(), ids.begin() + static_cast<std::ptrdiff_t>(i),
                     ids.begin() + static_cast<std::ptrdiff_t>(i + n));
      i += n;
      if (static_cast<int64_t>(buffer_.size()) == shard_size_) flush();
    }
    tokens_ += static_cast<int64_t>(ids.size());
  }
  void push(int32_t id) { append(std::vector<int32_t>{id}); }
  // An SFT sample, whole in one shard: the shard is written at the first sample end at or
  // past shard_size tokens.
  void append_sample(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) {
    starts_.push_back(static_cast<int64_t>(buffer_.size()));
    buffer_.insert(buffer_.end(), ids.begin(), ids.end());
    mask_.insert(mask_.end(), mask.begin(), mask.end());
    tokens_ += static_cast<int64_t>(ids.size());
    if (static_cast<int64_t>(buffer_.size()) >= shard_size_) flush();
  }
  void flush() {
    if (buffer_.empty()) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06d.bin", prefix_.c_str(), index_++);
    if (starts_.empty())
      write_token_shard(dir_.file(name), buffer_.data(), static_cast<int64_t>(buffer_.size()), vocab_, eos_);
    else
      write_sft_shard(dir_.file(name), buffer_.data(), mask_.data(), static_cast<int64_t>(buffer_.size()), starts_,
                      vocab_, eos_);
    names_.push_back(name);
    buffer_.clear();
    mask_.clear();
    starts_.clear();
  }
  int64_t tokens() const { return tokens_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::string prefix_;
  const StagingDir& dir_;
  int64_t shard_size_, vocab_, eos_;
  std::vector<int32_t> buffer_;
  std::vector<uint8_t> mask_;    // SFT: the loss mask of buffer_
  std::vector<int64_t> starts_;  // SFT: where buffer_'s samples start
  int64_t tokens_ = 0;
  int index_ = 0;
  std::vector<std::string> names_;
};

class ProgressReporter {
 public:
  ProgressReporter(Progress mode, double interval, int64_t total_bytes)
      : enabled_(mode != Progress::Never),
        tty_(::isatty(2) == 1),
        interval_(interval),
        total_(total_bytes),
        start_(Clock::now()),
        last_(start_) {}
  void update(int64_t bytes, int64_t docs, int64_t tokens, bool final = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (!final && since < (tty_ ? 0.25 : interval_)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double frac = total_ > 0 ? std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total_)) : 1.0;
    const double mbs = elapsed > 0 ? static_cast<double>(bytes) / 1e6 / elapsed : 0.0;
    const double eta = frac > 0 && frac < 1 ? elapsed * (1 - frac) / frac : 0.0;
    char line[256];
    std::snprintf(line, sizeof line, "%5.1f%% %.1f/%.1f MB, %lld docs, %lld tokens, %.1f MB/s, ETA %.0f s", 100 * frac,
                  static_cast<double>(bytes) / 1e6, static_cast<double>(total_) / 1e6, static_cast<long long>(docs),
                  static_cast<long long>(tokens), mbs, eta);
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(frac * kWidth);
      std::fprintf(stderr, "\rprepare [%s%s] %s", std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(kWidth - filled), ' ').c_str(), line);
      if (final) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "prepare: %s\n", line);
    }
    std::fflush(stderr);
  }

 private:
  bool enabled_, tty_;
  double interval_;
  int64_t total_;
  Clock::time_point start_, last_;
};

// Per record: what it became, or why it could not be read.
struct Encoded {
  bool skip = false;  // an empty document
  RecordKind kind = RecordKind::Text;
  SftSample sample;   // Text: ids only (the mask is all ones)
  std::string error;  // a bad record: "file:line: what is wrong"
};

// The options' checks; the EOS id documents are separated by (-1: none).
int64_t checked_eos(const PrepareOptions& o, const Tokenizer& tokenizer) {
  if (o.output_dir.empty()) ZT_THROW_INPUT("prepare: an output directory is needed (--out DIR)");
  if (o.shard_size < 1)
    ZT_THROW_INPUT("prepare: --shard-size must be a positive number of tokens (got ", o.shard_size, ")");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    ZT_THROW_INPUT("prepare: --val-fraction must be in [0, 1) (got ", o.val_fraction, ")");
  const int64_t vocab = tokenizer.vocab_size();
  int64_t eos = o.eos_id == -2 ? tokenizer.eos_id() : o.eos_id;
  if (o.eos_id == -2 && eos < 0)
    ZT_THROW_INPUT("prepare: the ", tokenizer.kind(),
                   " tokenizer has no EOS token to separate documents; pass --eos ID, or --no-eos");
  if (eos >= vocab || eos < -1)
    ZT_THROW_INPUT("prepare: EOS id ", eos, " is outside the tokenizer's vocabulary of ", vocab);
  return eos;
}

// A JSONL record: its kind and tokens, or BadInput saying what is wrong with it.
void encode_json_record(const std::string& line, Encoded& e, const Tokenizer& tokenizer, const SftEncoder& sft,
                        const PrepareOptions& o) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& x) {
    ZT_THROW_INPUT("not valid JSON (", x.what(),
                   "); JSONL input needs one JSON object per line (a plain text file must not end in "
                   ".json/.jsonl)");
  }
  if (!j.is_object()) ZT_THROW_INPUT("expected a JSON object per line, got ", j.type_name());
  if (!detect_record_kind(j, o.jsonl_field, e.kind)) {
    if (auto f = j.find(o.jsonl_field); f != j.end())
      ZT_THROW_INPUT("field '", o.jsonl_field, "' is a ", f->type_name(),
                     "; it must hold the document text (or, as an array, a conversation)");
    std::string keys;
    for (auto k = j.begin(); k != j.end(); ++k) keys += (keys.empty() ? "" : ", ") + k.key();
    ZT_THROW_INPUT("no field '", o.jsonl_field, "' (the record has: ", keys.empty() ? "nothing" : keys,
                   "); choose the document field with ", o.field_option,
                   ", or give supervised fine-tuning records: {messages: [{role, content}, ...]}, "
                   "{prompt, response} (or completion), {instruction, input, output}");
  }
  if (e.kind == RecordKind::Text) {
    const std::string& text = j[o.jsonl_field].get_ref<const std::string&>();
    if (text.empty())
      e.skip = true;
    else
      e.sample.ids = tokenizer.encode(text);
  } else {
    e.sample = sft.encode(j, e.kind);
  }
}

// Encodes a chunk of records on every core; a bad record's BadInput is kept in its
// Encoded (the caller fails or skips it in order), any other error is rethrown.
void encode_chunk(const std::vector<DocumentRecord>& docs, std::vector<Encoded>& encoded, const Tokenizer& tokenizer,
                  const SftEncoder& sft, const PrepareOptions& o) {
  encoded.assign(docs.size(), {});
  std::exception_ptr error;
  const int64_t n = static_cast<int64_t>(docs.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    const DocumentRecord& d = docs[static_cast<size_t>(i)];
    Encoded& e = encoded[static_cast<size_t>(i)];
    try {
      if (!d.json_line) {
        e.sample.ids = tokenizer.encode(d.text);
        continue;
      }
      try {
        encode_json_record(d.text, e, tokenizer, sft, o);
      } catch (const Error& x) {
        if (x.kind() != ErrorKind::BadInput) throw;
        e.error = d.where + ": " + x.what();
      }
    } catch (...) {
#pragma omp critical(zt_prepare_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Puts encoded records into the train and validation shards, in input order: the first
// good record decides plain text or SFT for the whole run; bad records fail the run or
// are counted and skipped.
class RecordRouter {
 public:
  RecordRouter(const PrepareOptions& o, const Tokenizer& tokenizer, int64_t eos, ShardSink& train, ShardSink& val)
      : o_(o), tokenizer_(tokenizer), eos_(eos), train_(train), val_(val) {}

  void route(const std::vector<DocumentRecord>& docs, std::vector<Encoded>& encoded, PrepareSummary& s) {
    for (size_t k = 0; k < encoded.size(); ++k) {
      Encoded& e = encoded[k];
      if (e.skip) continue;
      if (e.error.empty() && mode_ == Mode::Unknown) {
        mode_ = e.kind == RecordKind::Text ? Mode::Text : Mode::Sft;
        first_record_ = docs[k].where;
      }
      if (e.error.empty() && mode_ == Mode::Text && e.kind != RecordKind::Text)
        e.error =
            str(docs[k].where, ": a ", record_kind_name(e.kind), " record among plain text documents (", first_record_,
                " is plain text): give supervised fine-tuning records alone, so that every sample has its "
                "loss mask");
      if (!e.error.empty()) {
        if (o_.bad_records == BadRecords::Fail)
          ZT_THROW_INPUT(e.error, " (--skip-bad-records / data.skip_bad_records: true counts and skips such records)");
        if (s.skipped_records++ < 5) ZT_WARN("skipping ", e.error);
        continue;
      }
      add(docs[k], e, s);
      e = {};
    }
  }

  bool sft() const { return mode_ == Mode::Sft; }

 private:
  enum class Mode { Unknown, Text, Sft };

  void add(const DocumentRecord& doc, Encoded& e, PrepareSummary& s) {
    const int64_t d = s.documents++;
    // The epsilon keeps k * 0.1 == integer exact despite binary rounding.
    const bool is_val = o_.val_fraction > 0 && std::floor(static_cast<double>(d + 1) * o_.val_fraction + 1e-9) >
                                                   std::floor(static_cast<double>(d) * o_.val_fraction + 1e-9);
    ShardSink& sink = is_val ? val_ : train_;
    (is_val ? s.val_documents : s.train_documents)++;
    if (mode_ == Mode::Text) {
      if (eos_ >= 0) sink.push(static_cast<int32_t>(eos_));
      sink.append(e.sample.ids);
      return;
    }
    ++s.kinds[static_cast<int>(e.kind)];
    if (e.kind == RecordKind::Text) {  // plain text among SFT records: every token counts
      std::vector<int32_t> ids = tokenizer_.added_prefix();
      ids.insert(ids.end(), e.sample.ids.begin(), e.sample.ids.end());
      if (eos_ >= 0) ids.push_back(static_cast<int32_t>(eos_));
      e.sample.ids = std::move(ids);
      e.sample.mask.assign(e.sample.ids.size(), 1);
    }
    if (o_.sft_window > 0 && !is_val)
      count_untrained(s.untrained, e.sample.mask.data(), static_cast<int64_t>(e.sample.mask.size()), o_.sft_window,
                      [&] { return doc.where; });
    sink.append_sample(e.sample.ids, e.sample.mask);
  }

  const PrepareOptions& o_;
  const Tokenizer& tokenizer_;
  const int64_t eos_;
  ShardSink& train_;
  ShardSink& val_;
  Mode mode_ = Mode::Unknown;
  std::string first_record_;  // where the mode was decided
};

// A manifest for people and tools; the shards are self-describing without it.
void write_manifest(const StagingDir& staging, const PrepareSummary& s, const PrepareOptions& o,
                    const Tokenizer& tokenizer, int64_t eos, const ShardSink& train, const ShardSink& val) {
  nlohmann::json manifest = {
      {"format", s.sft ? "zerotrain-tokens-v2" : "zerotrain-tokens-v1"},
      {"tokenizer", tokenizer.kind()},
      {"vocab_size", tokenizer.vocab_size()},
      {"eos_id", eos},
      {"documents", s.documents},
      {"train", {{"documents", s.train_documents}, {"tokens", s.train_tokens}, {"shards", train.names()}}},
      {"val", {{"documents", s.val_documents}, {"tokens", s.val_tokens}, {"shards", val.names()}}},
      {"shard_size", o.shard_size},
      {"val_fraction", o.val_fraction},
      {"input_bytes", s.bytes}};
  if (s.skipped_records > 0) manifest["skipped_records"] = s.skipped_records;
  if (s.sft) {
    nlohmann::json kinds = nlohmann::json::object();
    for (RecordKind k : {RecordKind::Text, RecordKind::Messages, RecordKind::PromptResponse, RecordKind::Alpaca})
      if (s.kinds[static_cast<int>(k)] > 0) kinds[record_kind_name(k)] = s.kinds[static_cast<int>(k)];
    manifest["sft"] = {
        {"records", kinds},
        {"chat_template", s.chat_template.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.chat_template)}};
  }
  const std::string text = manifest.dump(2) + "\n";
  write_file_atomic(staging.file("dataset.json"), [&](std::FILE* f) {
    if (std::fwrite(text.data(), 1, text.size(), f) != text.size())
      ZT_THROW_IO(staging.file("dataset.json"), ": write failed");
  });
}

}  // namespace

std::vector<std::string> list_prepare_inputs(const std::vector<std::string>& inputs) {
  return list_document_files(inputs);
}

PrepareSummary prepare_dataset(const PrepareOptions& o, const Tokenizer& tokenizer) {
  const auto start = Clock::now();
  const int64_t eos = checked_eos(o, tokenizer);
  const int64_t vocab = tokenizer.vocab_size();
  const std::vector<std::string> files = list_prepare_inputs(o.inputs);
  int64_t total_bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    total_bytes += static_cast<int64_t>(fs::file_size(f, ec));
  }

  StagingDir staging(o.output_dir);
  ShardSink train("train", staging, o.shard_size, vocab, eos), val("val", staging, o.shard_size, vocab, eos);
  DocumentOptions doc_options{o.jsonl_field, o.field_option};
  doc_options.jsonl = DocumentOptions::Jsonl::Records;
  DocumentReader reader(files, doc_options);
  ProgressReporter progress(o.progress, o.progress_interval_s, total_bytes);
  SftEncoderOptions sft_options;
  sft_options.field = o.jsonl_field;
  sft_options.chat_template = o.chat_template;
  sft_options.chat_template_option = o.chat_template_option;
  sft_options.eos_id = eos;
  const SftEncoder sft(tokenizer, sft_options);
  PrepareSummary s;
  std::vector<DocumentRecord> docs;
  std::vector<Encoded> encoded;
  RecordRouter router(o, tokenizer, eos, train, val);
  // Chunks of ~ 16 MB keep every core busy and the memory bounded.
  constexpr size_t kChunkBytes = 16u << 20;
  while (reader.next_chunk(docs, kChunkBytes, s.bytes)) {
    encode_chunk(docs, encoded, tokenizer, sft, o);
    router.route(docs, encoded, s);
    progress.update(s.bytes, s.documents, train.tokens() + val.tokens());
  }
  s.sft = router.sft();
  if (s.sft && (s.kinds[static_cast<int>(RecordKind::Messages)] > 0 || !o.chat_template.empty()))
    s.chat_template = sft.template_origin();
  if (s.skipped_records > 0) ZT_WARN("prepare: skipped ", s.skipped_records, " bad record(s) (--skip-bad-records)");
  if (s.documents == 0)
    ZT_THROW_INPUT("prepare: the inputs hold no documents (", files.size(), " file(s), all empty",
                   o.jsonl_field.empty() ? "" : " or without text", ")");
  train.flush();
  val.flush();
  if (o.val_fraction > 0 && s.val_documents == 0)
    ZT_WARN("prepare: --val-fraction ", o.val_fraction, " of ", s.documents, " documents selects none for validation");
  s.train_tokens = train.tokens();
  s.val_tokens = val.tokens();
  write_manifest(staging, s, o, tokenizer, eos, train, val);
  staging.commit([](const std::string& name) {
    const bool ours = name == "dataset.json" ||
                      ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) && ends_with(name, ".bin"));
    return !ours;  // stale shards of an earlier run go; other files stay
  });
  for (const auto& n : train.names()) s.shards.push_back(staging.target() + "/" + n);
  for (const auto& n : val.names()) s.shards.push_back(staging.target() + "/" + n);
  s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  progress.update(s.bytes, s.documents, s.train_tokens + s.val_tokens, true);
  return s;
}

}  // namespace zt::io
