// An HF config.json checked against its weight files before any allocation: the layer
// count against the layer indices in the tensor names, then every tensor's shape against
// the config (read from the safetensors headers only), then the parameters' bytes against
// free host memory. A config.json with a huge num_layers or hidden_size is then a BadInput
// error naming config.json and the numbers, instead of an allocation of the whole model.
#pragma once
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace zt::model {

// `config` was read from `config_source`; `weights` is the model path (file or directory).
void check_hf_config_against_weights(const ModelConfig& config, const std::string& config_source,
                                     const std::string& weights);

// BadInput when a model of `config` with `bytes_per_param` bytes per parameter (parameters,
// plus gradients when they are allocated too) exceeds free host memory.
void check_model_fits_host(const ModelConfig& config, double bytes_per_param, const std::string& what);

}  // namespace zt::model
