// What a data file given as documents is, decided from its first bytes (and its name only
// to tell JSON Lines from plain text): text, JSON Lines, Arrow IPC (stream or file),
// Parquet, or something binary that must never be tokenized as text.
//
// Content wins over the name: a Parquet file called data.txt is read as Parquet, and a
// gzip file called data.jsonl is refused as gzip. The checks look at the first 64 KiB:
// a known binary magic (safetensors, gzip, zstd, zip, token shards, pickle, ...), a NUL
// byte or invalid UTF-8 there is an error naming the file and what it looks like.
#pragma once
#include <string>

namespace zt::io {

enum class DataFormat {
  Text,         // one document: the whole file
  Jsonl,        // one JSON object per line (.jsonl, .ndjson, .json)
  ArrowStream,  // Arrow IPC stream: 0xFFFFFFFF + a Schema message (datasets' save_to_disk)
  ArrowFile,    // Arrow IPC file: "ARROW1" ... "ARROW1" (pyarrow.ipc.new_file, Feather v2)
  Parquet,      // "PAR1" ... "PAR1"
};

const char* data_format_name(DataFormat format);

// The format of the document file at `path`. BadInput naming the file when it cannot be
// read or looks binary (saying what it looks like and what to give instead).
DataFormat detect_data_format(const std::string& path);

// Whether a file name says JSON Lines (.jsonl, .ndjson, .json).
bool has_jsonl_name(const std::string& path);

}  // namespace zt::io
