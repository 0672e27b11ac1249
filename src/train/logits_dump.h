// Every position's f32 logits of a model over documents, written to a safetensors file,
// for comparing zerotrain's forward with another implementation's (tests/gpu/
// hf_load_check.py compares them with transformers' logits of the same ids).
//
// Each document is one forward pass of its whole length from position 0 (no windows: it
// must fit the model's context). The file holds, for document i (0-based):
//   input_ids.i   I32 [T]     the ids the model saw (BOS included as the tokenizer adds it)
//   logits.i      F32 [T, V]  V = the model's vocab_size
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace zt::train {

// BadInput (naming the document) for an empty document or one longer than the context.
void dump_logits(const model::Transformer& model, const std::vector<std::vector<int32_t>>& documents,
                 const std::string& path);

}  // namespace zt::train
