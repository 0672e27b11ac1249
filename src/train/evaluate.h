// Evaluation: mean next-token loss and perplexity of a model on documents.
//
// Each document is scored on its own, in non-overlapping windows of the context: inputs
// doc[s .. s+T) with targets doc[s+1 .. s+T+1) for s = 0, T, 2T, ... So every token but
// a document's first is predicted exactly once, seeing only the earlier tokens of its own
// window (at most T). A document of n tokens contributes n - 1 predictions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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
EvalResult evaluate(model::Transformer& model, const std::vector<std::vector<int32_t>>& documents,
                    const EvalOptions& options);

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
