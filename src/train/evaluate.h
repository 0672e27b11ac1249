// Evaluation: mean next-token loss and perplexity of a model on documents.
//
// Each document is scored on its own, in non-overlapping windows of the context: inputs
// doc[s .. s+T) with targets doc[s+1 .. s+T+1) for s = 0, T, 2T, ... So every token but
// a document's first is predicted exactly once, seeing only the earlier tokens of its own
// window (at most T). A document of n tokens contributes n - 1 predictions.
//
// Supervised fine-tuning data (SFT records or version 2 shards) is scored as training scores
// it: one document per sample, and only the targets its loss mask counts (the response
// tokens; the prompt's are -100 as HF's labels).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "model/transformer.h"

namespace zt::train {

struct EvalOptions {
  int64_t seq_len = 0;     // window T; 0: the model's max_position_embeddings
  int64_t batch_size = 8;  // windows per forward pass
};

struct EvalResult {
  double loss_sum = 0.0;  // summed over predicted tokens, nats
  int64_t tokens = 0;     // predicted tokens
  int64_t documents = 0;  // documents with at least 2 tokens
  int64_t windows = 0;
  double mean_loss() const { return tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0; }
  double perplexity() const;
};

// Runs the model in eval mode (no dropout) and leaves it there. Documents with fewer
// than two tokens predict nothing and are skipped. No prediction at all is BadInput.
// loss_masks (SFT data): one per document, as long as it; token i > 0 is predicted (counted
// in the loss) only where loss_masks[d][i] is 1. Null: every token but the first counts.
EvalResult evaluate(model::Transformer& model, const std::vector<std::vector<int32_t>>& documents,
                    const EvalOptions& options, const std::vector<std::vector<uint8_t>>* loss_masks = nullptr);

// SFT documents: one per sample, each with its loss mask (1: a target the loss counts).
struct SftDocuments {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<uint8_t>> masks;
  bool empty() const { return ids.empty(); }
};

// Version 2 (SFT) shards (a .bin file, a directory or a glob): their samples and masks.
// Empty when the first shard has no loss mask (plain token shards: read_shard_documents);
// a mix of both is BadInput.
SftDocuments read_sft_shard_documents(const std::string& path);

struct SftRecordOptions {
  std::string jsonl_field = "text";
  std::string chat_template;  // a built-in name or a Jinja file; "" = the tokenizer's
  bool skip_bad_records = false;
};
// A JSON Lines file whose first record is an SFT record (io/sft_record.h): its samples and
// masks exactly as `zerotrain prepare` (and so training) renders and masks them, through a
// temporary directory removed afterwards. Empty for any other file (plain text records,
// other formats). Bad records: as prepare (BadInput naming file:line, or skipped).
SftDocuments read_sft_records(const std::string& path, const io::Tokenizer& tokenizer, const SftRecordOptions& o);

// Text documents from a data file or folder (io/document_source.h): a .jsonl (.ndjson,
// .json) file gives one document per line (the string field `jsonl_field` of each object;
// blank lines skipped), Arrow / Parquet / a save_to_disk folder one per row of that column,
// any other text file one document; binary files are refused. Errors name the file, line
// and field.
std::vector<std::string> read_text_documents(const std::string& path, const std::string& jsonl_field = "text");

// Token documents from shards (a .bin file, a directory or a glob; zerotrain, llm.c or
// nanoGPT format): a new document starts at every `separator` id (zerotrain prepare and
// llm.c put the EOS before each document, so it opens its document and is not predicted).
// separator < 0: all tokens are one document.
std::vector<std::vector<int32_t>> read_shard_documents(const std::string& path, int64_t separator);

}  // namespace zt::train
