// Documents from the data files users bring, whatever their format (io/data_format.h): a
// text file is one document; JSON Lines one per non-blank line (its field); Arrow IPC
// (stream, file, a save_to_disk folder's data files) and Parquet one per non-null row of
// the text column. The one reader for `prepare`, data.train / data.validation text, eval's
// --data and the text a preset's tokenizer is trained on, so every path accepts and
// refuses the same inputs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zt::io {

struct DocumentOptions {
  std::string field = "text";  // the JSONL field / Arrow or Parquet column holding the text
  // How the user names the field where this reader runs, for the fix in errors
  // ("--field NAME" for prepare, "data.jsonl_field" in a run config).
  std::string field_option = "--field NAME";
  // JSON Lines are handed over as records (DocumentRecord::json_line), unparsed, for
  // `prepare` to read supervised fine-tuning records (io/sft_record.h) and skip bad ones.
  enum class Jsonl { Field, Records } jsonl = Jsonl::Field;
};

// A document, or with DocumentOptions::Jsonl::Records a JSON Lines record as it stands.
struct DocumentRecord {
  std::string text;        // the document; the line itself when json_line
  bool json_line = false;  // text is a JSON Lines record, not yet parsed
  std::string where;       // "file:line" of a record; the file otherwise
};

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  // The next document (possibly empty: callers skip those); false after the last.
  virtual bool next(std::string& doc) = 0;
  // next() as a record (the default: the document, not a JSON line).
  virtual bool next_record(DocumentRecord& record) {
    record.json_line = false;
    return next(record.text);
  }
  // Bytes of the file consumed so far (progress); the whole file once next() is false.
  virtual int64_t bytes_done() const = 0;
};

// Opens one data file, its format detected from its content. BadInput naming the file
// when it is binary, malformed, or lacks the text field/column.
std::unique_ptr<DocumentSource> open_document_source(const std::string& path, const DocumentOptions& options);

// Expands inputs into data files in order: a file as it is; a save_to_disk Dataset folder
// its data files in state.json's order; any other directory its files recursively, sorted
// by path, hidden ones skipped (a save_to_disk folder met inside counts as one entry, in
// its own order). BadInput for a missing input, an empty directory or a DatasetDict folder.
std::vector<std::string> list_document_files(const std::vector<std::string>& inputs);

// Every non-empty document of the inputs (eval, tokenizer training). BadInput as above,
// and when there is none.
std::vector<std::string> read_documents(const std::vector<std::string>& inputs, const DocumentOptions& options);

}  // namespace zt::io
