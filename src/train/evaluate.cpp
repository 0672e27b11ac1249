// Windowed evaluation over documents (see evaluate.h). Windows of all documents are
// batched together; a window shorter than T (a document's tail) is padded with token 0
// and ignored targets: attention is causal, so the padding changes no earlier position.
#include "train/evaluate.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/byte_tokenizer.h"
#include "io/document_source.h"
#include "io/prepare.h"
#include "io/sft_record.h"
#include "io/token_dataset.h"
#include "io/tokenizer.h"

namespace zt::train {

double EvalResult::perplexity() const { return std::exp(mean_loss()); }

EvalResult evaluate(model::Transformer& model, const std::vector<std::vector<int32_t>>& documents,
                    const EvalOptions& o, const std::vector<std::vector<uint8_t>>* loss_masks) {
  if (loss_masks) {
    ZT_CHECK(loss_masks->size() == documents.size(), "evaluate: ", loss_masks->size(), " loss masks for ",
             documents.size(), " documents");
    for (size_t d = 0; d < documents.size(); ++d)
      ZT_CHECK((*loss_masks)[d].size() == documents[d].size(), "evaluate: document ", d, " has ",
               documents[d].size(), " tokens but a loss mask of ", (*loss_masks)[d].size());
  }
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
    const std::vector<uint8_t>* mask;  // null: every target counts
    int64_t start;
  };
  std::vector<Window> windows;
  EvalResult r;
  int64_t longest = 0;
  for (size_t d = 0; d < documents.size(); ++d) {
    const std::vector<int32_t>& doc = documents[d];
    const std::vector<uint8_t>* mask = loss_masks ? &(*loss_masks)[d] : nullptr;
    const int64_t n = static_cast<int64_t>(doc.size());
    if (n < 2) continue;
    ++r.documents;
    for (int64_t s = 0; s < n - 1; s += T) {
      windows.push_back({&doc, mask, s});
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
        const size_t next = static_cast<size_t>(w.start + t + 1);
        tokens[static_cast<size_t>(b * T + t)] = doc[static_cast<size_t>(w.start + t)];
        if (!w.mask || (*w.mask)[next]) targets[static_cast<size_t>(b * T + t)] = doc[next];
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
  if (loss_masks && r.tokens == 0)
    ZT_THROW_INPUT("nothing to evaluate: no sample has a response token (every loss mask bit is 0)");
  return r;
}

SftDocuments read_sft_shard_documents(const std::string& path) {
  SftDocuments out;
  const std::vector<std::string> shards = io::list_token_shards(path);
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  bool sft = false;
  for (size_t k = 0; k < shards.size(); ++k) {
    const auto shard = io::open_token_shard(shards[k]);
    if (k == 0) sft = shard->has_loss_mask();
    if (shard->has_loss_mask() != sft)
      ZT_THROW_INPUT("'", path, "' mixes SFT shards (with a loss mask) and plain token shards (", shards[k],
                     "): evaluate them separately");
    if (!sft) continue;
    const int64_t n = shard->size();
    ids.resize(static_cast<size_t>(n));
    mask.resize(static_cast<size_t>(n));
    shard->read(0, n, ids.data());
    shard->read_mask(0, n, mask.data());
    const std::vector<int64_t>& starts = shard->sample_starts();
    for (size_t s = 0; s < starts.size(); ++s) {
      const int64_t begin = starts[s], end = s + 1 < starts.size() ? starts[s + 1] : n;
      out.ids.emplace_back(ids.begin() + begin, ids.begin() + end);
      out.masks.emplace_back(mask.begin() + begin, mask.begin() + end);
    }
  }
  return out;
}

namespace {

// A directory under the system's temporary directory, removed with what it holds when the
// object goes (eval's SFT records are prepared there).
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "zerotrain-eval-XXXXXX").string();
    if (!mkdtemp(pattern.data())) ZT_THROW_IO("cannot create a temporary directory like ", pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // best effort: a leftover in /tmp is harmless
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Whether the first record of `path` is an SFT record (a JSON Lines file of messages,
// prompt/response or Alpaca records), as prepare decides it.
bool starts_with_sft_record(const std::string& path, const std::string& field) {
  io::DocumentOptions o{field, "--jsonl-field NAME"};
  o.jsonl = io::DocumentOptions::Jsonl::Records;
  const auto source = io::open_document_source(path, o);
  io::DocumentRecord record;
  while (source->next_record(record)) {
    if (!record.json_line) return false;
    if (record.text.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(record.text, nullptr, /*allow_exceptions=*/false);
    io::RecordKind kind = io::RecordKind::Text;
    return j.is_object() && io::detect_record_kind(j, field, kind) && kind != io::RecordKind::Text;
  }
  return false;
}

}  // namespace

SftDocuments read_sft_records(const std::string& path, const io::Tokenizer& tokenizer, const SftRecordOptions& o) {
  if (std::filesystem::is_directory(path) || !starts_with_sft_record(path, o.jsonl_field)) return {};
  const ScratchDir dir;
  io::PrepareOptions po;
  po.inputs = {path};
  po.output_dir = (dir.path() / "data").string();
  po.jsonl_field = o.jsonl_field;
  po.field_option = "--jsonl-field NAME";
  po.chat_template = o.chat_template;
  po.bad_records = o.skip_bad_records ? io::BadRecords::Skip : io::BadRecords::Fail;
  po.progress = io::Progress::Never;
  po.eos_id = tokenizer.eos_id();  // after each sample, as training's prepare appends it (none: nothing)
  const io::PrepareSummary s = io::prepare_dataset(po, tokenizer);
  if (!s.chat_template.empty()) ZT_INFO("eval: SFT conversations rendered with ", s.chat_template);
  return read_sft_shard_documents(po.output_dir);
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
