// Hugging Face weights (safetensors) <-> the parameter registry.
//
// Registry names are HF names ("transformer.h.0.attn.c_attn.weight",
// "model.layers.0.self_attn.q_proj.weight", ...), from the weights table (model/weights.h,
// model/hf_names.h). Two layout differences are handled here:
//   - A parameter whose ParamSpec::layout differs from its hf_layout is transposed between
//     file and registry. The weights table keeps the file's layout (GPT-2's Conv1D weights
//     stay [in, out]), so this happens only for hand-made specs.
//   - Embedding / head matrices have vocab rows padded to a multiple of 128 in the
//     registry (ParamSpec::shape); files hold spec.hf_shape (the leading rows). Padding rows
//     are zero after a load and are not written by a save.
// Loading also accepts old hub files (the family's legacy prefix, e.g. gpt2's names without
// "transformer."), skips the family's non-parameter buffers (GPT-2's attn.bias, Llama's
// rotary_emb.inv_freq), and ignores lm_head.weight when the head is tied.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/registry.h"

namespace zt::model {

// Where and how a registry parameter appears in a HF file.
struct HfTensorLayout {
  std::string name;         // the HF tensor name
  Shape shape;              // shape in the file
  bool transposed = false;  // the file holds the transpose of our shape
};
HfTensorLayout hf_layout(const model::ModelConfig& config, const model::ParamSpec& spec);
// The file holds the transpose of the registry's matrix (spec.layout != spec.hf_layout).
bool hf_file_transposed(const model::ParamSpec& spec);

// Copies a registry-layout tensor of `spec` (its value or its gradient: contiguous, shape
// spec.shape; a GPU tensor is brought to the host first) into `dst` (host, contiguous,
// shape hf_layout().shape, any floating dtype): drops padding rows, transposes Conv1D
// weights, converts the dtype.
void to_hf_layout(const model::ModelConfig& config, const model::ParamSpec& spec, const Tensor& src, const Tensor& dst);
// The inverse: `src` in file layout (host, contiguous; may be unaligned) into the
// registry-layout `dst`; padding rows are set to zero.
void from_hf_layout(const model::ModelConfig& config, const model::ParamSpec& spec, const Tensor& src,
                    const Tensor& dst);

// The safetensors files a model path names: a .safetensors file, or a directory holding
// model.safetensors or model.safetensors.index.json (sharded). Throws BadInput otherwise.
std::vector<std::string> hf_weight_files(const std::string& path);

struct HfLoadReport {
  int64_t loaded = 0;                // registry entries filled
  std::vector<std::string> skipped;  // file tensors deliberately ignored (buffers, tied head)
  std::vector<std::string> unused;   // file tensors that match nothing (a warning is logged)
};

// Fills every registry parameter (host, allocated) from the files at `path`, converting
// dtypes; with `only`, just that unit's (the ZeRO-3 engine loads one unit at a time, so
// the whole model is never in memory). Missing tensors, wrong shapes and non-floating
// dtypes are BadInput errors that name the file and the tensors.
HfLoadReport load_hf_weights(model::ParameterRegistry& registry, const model::ModelConfig& config,
                             const std::string& path, const model::Unit* only = nullptr);

// Elements [begin, begin + out.numel()) of `unit`'s flat parameter buffer, read from the
// files at `path` (only the bytes of that range are touched): a ZeRO-3 rank loads just its
// slice. Alignment gaps and vocab padding rows are zero. BadInput as load_hf_weights.
void load_hf_unit_slice(const model::ModelConfig& config, const std::string& path, const model::Unit& unit,
                        int64_t begin, const Tensor& out);

// Writes the registry's parameters as one HF safetensors file (HF names and layouts, in
// `dtype`, metadata {"format": "pt"}), atomically. `path` is the file, or a directory
// (then the file is path/model.safetensors).
void save_hf_weights(const model::ParameterRegistry& registry, const model::ModelConfig& config,
                     const std::string& path, DType dtype);

}  // namespace zt::model
