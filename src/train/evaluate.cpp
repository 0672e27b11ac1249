// Windowed evaluation over documents (see evaluate.h). Windows of all documents are
// batched together; a window shorter than T (a document's tail) is padded with token 0
// and ignored targets: attention is causal, so the padding changes no earlier position.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/byte_tokenizer.h"
#include "io/document_source.h"
#include "io/token_dataset.h"

namespace zt::train {

double EvalResult::perplexity() const { return std::exp(mean_loss()); }

EvalResult evaluate(model::Transformer& model, const std::vector<std::vector<int32_t>>& documents,
                    const EvalOptions& o) {
  const model::ModelConfig& c = model.config();
  int64_t T = o.seq_len > 0 ? o.seq_len : c.max_position_embeddings;
  if (T > c.max_position_embeddings)
    ZT_THROW_INPUT("--seq-len ", T, " exceeds the model's context (max_position_embeddings ", c.max_position_embeddings,
                   "): use at most that");
  if (o.batch_size < 1) ZT_THROW_INPUT("evaluation batch size must be positive, got ", o.batch_size);

  // Window starts (document, offset); the longest window decides T (short documents
  // need no full-context forward).
  struct Window {
    const std::vector<int32_t>* doc;
    int64_t start;
  };
  std::vector<Window> windows;
  EvalResult r;
  int64_t longest = 0;
  for (const auto& doc : documents) {
    const int64_t n = static_cast<int64_t>(doc.size());
    if (n < 2) continue;
    ++r.documents;
    for (int64_t s = 0; s < n - 1; s += T) {
      windows.push_back({&doc, s});
      longest = std::max(longest, std::min(T, n - 1 - s));
    }
  }
  if (windows.empty())
    ZT_THROW_INPUT("nothing to evaluate: every document has fewer than 2 tokens (no next token to predict)");
  T = longest;
  r.windows = static_cast<int64_t>(windows.size());

  model.set_mode(model::Mode::Eval);
  std::vector<int32_t> tokens, targets;
  for (size_t first = 0; first < windows.size(); first += static_cast<size_t>(o.batch_size)) {
    const int64_t B = std::min<int64_t>(o.batch_size, static_cast<int64_t>(windows.size() - first));
    tokens.assign(static_cast<size_t>(B * T), 0);
    targets.assign(static_cast<size_t>(B * T), model::kIgnoreIndex);
    for (int64_t b = 0; b < B; ++b) {
      const Window& w = windows[first + static_cast<size_t>(b)];
      const std::vector<int32_t>& doc = *w.doc;
      const int64_t len = std::min(T, static_cast<int64_t>(doc.size()) - 1 - w.start);
      for (int64_t t = 0; t < len; ++t) {
        tokens[static_cast<size_t>(b * T + t)] = doc[static_cast<size_t>(w.start + t)];
        targets[static_cast<size_t>(b * T + t)] = doc[static_cast<size_t>(w.start + t + 1)];
      }
    }
    for (int32_t id : targets)
      if (id != model::kIgnoreIndex && (id < 0 || id >= c.vocab_size))
        ZT_THROW_INPUT("token id ", id, " is outside the model's vocabulary of ", c.vocab_size,
                       ": check that the data was tokenized for this model");
    const Tensor tok(tokens.data(), {B, T}, DType::I32), tgt(targets.data(), {B, T}, DType::I32);
    const ops::CrossEntropyResult res = model.forward(tok, tgt);
    r.loss_sum += res.loss_sum;
    r.tokens += res.count;
  }
  return r;
}

std::vector<std::string> read_text_documents(const std::string& path, const std::string& field) {
  return io::read_documents({path}, io::DocumentOptions{field, "--jsonl-field NAME"});
}

std::vector<std::vector<int32_t>> read_shard_documents(const std::string& path, int64_t separator) {
  const std::vector<std::string> shards = io::list_token_shards(path);
  std::vector<std::vector<int32_t>> docs;
  std::vector<int32_t> buffer;
  for (const std::string& shard_path : shards) {
    const auto shard = io::open_token_shard(shard_path);
    buffer.resize(static_cast<size_t>(shard->size()));
    shard->read(0, shard->size(), buffer.data());
    for (const int32_t id : buffer) {
      // A document may continue across shards; only the separator starts a new one.
      if (docs.empty() || (separator >= 0 && id == separator)) docs.emplace_back();
      docs.back().push_back(id);
    }
  }
  if (docs.empty()) ZT_THROW_INPUT("'", path, "' holds no tokens");
  return docs;
}

}  // namespace zt::train
