#include "io/document_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/arrow_ipc.h"
#include "io/bounded_file.h"
#include "io/data_format.h"
#include "io/hf_dataset_dir.h"
#include "io/parquet_text.h"

namespace zt::io {
namespace fs = std::filesystem;

namespace {

class TextSource final : public DocumentSource {
 public:
  explicit TextSource(std::string path) : path_(std::move(path)) {}
  bool next(std::string& doc) override {
    if (done_) return false;
    // One document: the whole file (a regular file, so its size bounds the read).
    doc = read_bounded_file(path_, "text data file", kNoCap);
    bytes_ = static_cast<int64_t>(doc.size());
    done_ = true;
    return true;
  }
  int64_t bytes_done() const override { return bytes_; }

 private:
  std::string path_;
  bool done_ = false;
  int64_t bytes_ = 0;
};

class JsonlSource final : public DocumentSource {
 public:
  // The check first: an ifstream's open of a FIFO would wait for a writer.
  JsonlSource(std::string path, const DocumentOptions& o)
      : path_((check_bounded_file(path, "JSONL data file", kNoCap), std::move(path))),
        o_(o),
        in_(path_, std::ios::binary) {
    if (!in_) ZT_THROW_INPUT(path_, ": cannot read");
  }
  bool next(std::string& doc) override {
    std::string line;
    if (!next_line(line)) return false;
    doc = field_of(line);
    return true;
  }
  bool next_record(DocumentRecord& r) override {
    if (o_.jsonl == DocumentOptions::Jsonl::Field) {
      r.json_line = false;
      r.where = path_;
      return next(r.text);
    }
    if (!next_line(r.text)) return false;
    r.json_line = true;
    r.where = str(path_, ":", line_);
    return true;
  }
  int64_t bytes_done() const override { return bytes_; }

 private:
  bool next_line(std::string& line) {
    while (std::getline(in_, line)) {
      ++line_;
      bytes_ += static_cast<int64_t>(line.size()) + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      return true;
    }
    if (in_.bad()) ZT_THROW_IO(path_, ": read error");
    return false;
  }
  std::string field_of(const std::string& line) const {
    const std::string where = str(path_, ":", line_);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      ZT_THROW_INPUT(where, ": not valid JSON (", e.what(),
                     "); JSONL input needs one JSON object per line (a plain text file must not end in .json/.jsonl)");
    }
    if (!j.is_object()) ZT_THROW_INPUT(where, ": expected a JSON object per line, got ", j.type_name());
    auto it = j.find(o_.field);
    if (it == j.end()) {
      std::string keys;
      for (auto k = j.begin(); k != j.end(); ++k) keys += (keys.empty() ? "" : ", ") + k.key();
      ZT_THROW_INPUT(where, ": no field '", o_.field, "' (the record has: ", keys.empty() ? "nothing" : keys,
                     "); choose the document field with ", o_.field_option,
                     " (supervised fine-tuning records, {messages}, {prompt, response} or {instruction, output}, "
                     "are read by `zerotrain prepare` and data.train)");
    }
    if (!it->is_string())
      ZT_THROW_INPUT(where, ": field '", o_.field, "' is a ", it->type_name(), "; it must hold the document text",
                     it->is_array() ? " (a conversation is read by `zerotrain prepare` and data.train)" : "");
    return it->get<std::string>();
  }

  std::string path_;
  DocumentOptions o_;
  std::ifstream in_;
  int64_t line_ = 0, bytes_ = 0;
};

// Arrow IPC or Parquet: one document per non-null value of the text column.
template <class Column>
class ColumnSource final : public DocumentSource {
 public:
  ColumnSource(std::string path, const DocumentOptions& o)
      : path_(std::move(path)), field_(o.field), column_(path_, field_, o.field_option) {}
  bool next(std::string& doc) override {
    std::string_view v;
    if (column_.next(v)) {
      doc.assign(v.data(), v.size());
      return true;
    }
    // Null rows have no text (datasets writes None as null); the same as an empty document.
    if (!warned_ && column_.nulls_skipped() > 0)
      ZT_WARN(path_, ": ", column_.nulls_skipped(), " null value(s) in column '", field_, "' skipped");
    warned_ = true;
    return false;
  }
  int64_t bytes_done() const override { return column_.bytes_done(); }

 private:
  std::string path_, field_;
  Column column_;
  bool warned_ = false;
};

}  // namespace

std::unique_ptr<DocumentSource> open_document_source(const std::string& path, const DocumentOptions& o) {
  switch (detect_data_format(path)) {
    case DataFormat::Text:
      return std::make_unique<TextSource>(path);
    case DataFormat::Jsonl:
      return std::make_unique<JsonlSource>(path, o);
    case DataFormat::ArrowStream:
    case DataFormat::ArrowFile:
      return std::make_unique<ColumnSource<ArrowTextColumn>>(path, o);
    case DataFormat::Parquet:
      return std::make_unique<ColumnSource<ParquetTextColumn>>(path, o);
  }
  ZT_THROW_INPUT(path, ": unknown data format");
}

std::vector<std::string> list_document_files(const std::vector<std::string>& inputs) {
  if (inputs.empty()) ZT_THROW_INPUT("no input files given (text, JSONL, Arrow or Parquet files, or directories)");
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      switch (hf_dataset_dir_kind(in)) {
        case HfDatasetDir::Dataset: {
          const auto data = hf_dataset_files(in);
          files.insert(files.end(), data.begin(), data.end());
          continue;
        }
        case HfDatasetDir::DatasetDict:
          refuse_dataset_dict(in);
        case HfDatasetDir::None:
          break;
      }
      // (sort key, files): a save_to_disk folder inside is one entry keeping its order.
      std::vector<std::pair<std::string, std::vector<std::string>>> found;
      for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        const std::string name = it->path().filename().string();
        const bool dir = it->is_directory(ec);
        if (!name.empty() && name[0] == '.') {
          if (dir) it.disable_recursion_pending();
          continue;
        }
        if (dir) {
          const std::string p = it->path().string();
          const HfDatasetDir kind = hf_dataset_dir_kind(p);
          if (kind == HfDatasetDir::DatasetDict) refuse_dataset_dict(p);
          if (kind == HfDatasetDir::Dataset) {
            found.emplace_back(p, hf_dataset_files(p));
            it.disable_recursion_pending();
          }
        } else if (it->is_regular_file(ec)) {
          found.emplace_back(it->path().string(), std::vector<std::string>{it->path().string()});
        }
      }
      if (ec) ZT_THROW_IO(in, ": cannot list (", ec.message(), ")");
      if (found.empty()) ZT_THROW_INPUT(in, ": directory holds no files to tokenize");
      std::sort(found.begin(), found.end());
      for (const auto& f : found) files.insert(files.end(), f.second.begin(), f.second.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else if (fs::exists(in, ec)) {
      check_bounded_file(in, "input file", kNoCap);  // a FIFO, a device: says which
      files.push_back(in);
    } else {
      ZT_THROW_INPUT(in, ": no such input file or directory");
    }
  }
  return files;
}

std::vector<std::string> read_documents(const std::vector<std::string>& inputs, const DocumentOptions& o) {
  std::vector<std::string> docs;
  for (const std::string& path : list_document_files(inputs)) {
    const auto source = open_document_source(path, o);
    std::string doc;
    while (source->next(doc))
      if (!doc.empty()) docs.push_back(std::move(doc));
  }
  if (docs.empty()) {
    std::string names;
    for (const auto& i : inputs) names += (names.empty() ? "" : ", ") + i;
    ZT_THROW_INPUT(names, ": no documents (empty, or no text in field '", o.field, "')");
  }
  return docs;
}

}  // namespace zt::io
