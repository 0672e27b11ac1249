#include "train/logits_dump.h"

#include <cstring>
#include <memory>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/inference.h"

namespace zt::train {

void dump_logits(const model::Transformer& model, const std::vector<std::vector<int32_t>>& documents,
                 const std::string& path) {
  const model::ModelConfig& c = model.config();
  if (documents.empty()) ZT_THROW_INPUT(path, ": no documents to compute logits for");
  int64_t longest = 0;
  for (size_t i = 0; i < documents.size(); ++i) {
    const int64_t n = static_cast<int64_t>(documents[i].size());
    if (n == 0) ZT_THROW_INPUT(path, ": document ", i, " has no tokens");
    if (n > c.max_position_embeddings)
      ZT_THROW_INPUT(path, ": document ", i, " has ", n, " tokens, more than the model's context of ",
                     c.max_position_embeddings, "; logits are dumped for whole documents: shorten it");
    longest = std::max(longest, n);
  }
  model::InferenceOptions io_opts;
  io_opts.max_seq_len = longest;
  model::InferenceEngine engine(model, io_opts);
  // The logits of every document stay in memory until the file is written (a check of a
  // few short texts, not a corpus).
  std::vector<std::shared_ptr<std::vector<float>>> logits;
  std::vector<io::TensorSource> sources;
  for (size_t i = 0; i < documents.size(); ++i) {
    const auto ids = std::make_shared<std::vector<int32_t>>(documents[i]);
    const int64_t n = static_cast<int64_t>(ids->size());
    auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(n * c.vocab_size));
    engine.reset();
    engine.forward(Tensor(ids->data(), {1, n}, DType::I32), Tensor(out->data(), {1, n, c.vocab_size}, DType::F32),
                   model::LogitsFor::AllTokens);
    sources.push_back({str("input_ids.", i), DType::I32, {n}, [ids](void* dst) {
                         std::memcpy(dst, ids->data(), ids->size() * sizeof(int32_t));
                       }});
    sources.push_back({str("logits.", i), DType::F32, {n, c.vocab_size}, [out](void* dst) {
                         std::memcpy(dst, out->data(), out->size() * sizeof(float));
                       }});
  }
  io::write_safetensors(path, sources, {{"format", "pt"}});
}

}  // namespace zt::train
