// Memory needed to train a model, before trying (`zerotrain estimate`; DeepSpeed's
// estimate_zero2_model_states_mem_needs / estimate_zero3_..._all_live): per GPU and per
// node's host memory, as zerotrain will hold them, and DeepSpeed's formulas for the same
// inputs beside them.
//
// zerotrain's figures come from what it allocates: the model's units as the registry
// builds them (vocabulary padded to 128 rows, each unit padded to the world size), the ZeRO
// engine's per-rank division (zero::zero_formula_bytes; one process runs stages 1-3 as
// stage 0), the step's activation buffers (model::activation_bytes) and the LM head's
// chunked logits (lm_head_chunk_plan), plus a fixed reserve for what is not counted
// (cuBLASLt workspaces, the caching allocator's rounding). Optimizer offload moves the
// optimizer state and a staging copy of the rank's gradients and parameters to the host
// (zero/offload_optimizer.h); parameter offload (with it, at stage 3) moves the 16-bit
// partitions to the host, and with offload_param nvme those past max_in_cpu elements to
// the drive, through buffer_count swap buffers of the largest unit's slice
// (zero/param_store.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/lora_config.h"

namespace zt::train {

struct EstimateInput {
  model::ModelConfig model;
  std::string model_name;  // as given (preset, directory or config.json)
  int stage = 2;
  config::OffloadDevice offload_optimizer = config::OffloadDevice::None, offload_param = config::OffloadDevice::None;
  int gpus_per_node = 1, nodes = 1;
  int64_t micro_batch = 8, seq_len = 1024;
  bool activation_checkpointing = false;
  config::Precision precision = config::Precision::BF16;
  double additional_buffer_factor = 1.5;  // DeepSpeed's default
  // offload_param nvme (DeepSpeed's defaults): elements per rank kept in host memory, and
  // the swap buffers of the rest.
  int64_t offload_param_max_in_cpu = 1000000000;
  int offload_param_buffer_count = 5;
  // LoRA (--peft, --lora-r): a frozen 16-bit base (parameters only) and adapters that hold
  // the gradients, master weights and moments. lora_source names it in messages.
  std::optional<model::LoraConfig> lora;
  std::string lora_source;
};

// GPU memory the step uses beyond the counted buffers (cuBLASLt workspaces, the caching
// allocator's rounding, small scratch): measured on the H100/H200 as the gap between the
// counted buffers and the allocator's peak (0.2-1.0 GiB; bench/NOTES.md).
constexpr int64_t kGpuReserveBytes = int64_t{512} << 20;

struct MemoryEstimate {
  int world = 1, effective_stage = 0;
  int64_t hf_parameters = 0, largest_layer_params = 0, padded_elements = 0, largest_unit_elements = 0;
  // What trains (with LoRA the adapters; else every element) and its largest unit.
  int64_t trainable_elements = 0, largest_trainable_unit_elements = 0;
  // zerotrain, per GPU
  int64_t gpu_model_states = 0;  // parameters, gradients, master weights and moments this rank keeps
  int64_t gpu_transient = 0;     // a unit's full gradients (stages 2-3), gathered units (stage 3)
  int64_t gpu_activations = 0;   // the step's buffers + the LM head's logits + the reserve
  int64_t gpu_bytes_per_gpu() const { return gpu_model_states + gpu_transient + gpu_activations; }
  // zerotrain, host memory of one node (offloaded state of its ranks; with the optimizer
  // on NVMe its swap buffers instead of its state)
  int64_t cpu_bytes_per_node = 0;
  // zerotrain, the swap files of one node's ranks (offload_optimizer nvme, offload_param nvme)
  int64_t nvme_bytes_per_node = 0;
  // DeepSpeed's formulas (model states only: no activations)
  std::string deepspeed_formula;
  int64_t deepspeed_gpu_bytes_per_gpu = 0, deepspeed_cpu_bytes_per_node = 0;
};

// Throws BadInput for impossible inputs (stage, counts, offload without its stage).
MemoryEstimate estimate_memory(const EstimateInput& in);

// The activation part alone (per GPU): the step's buffers, the LM head's logits chunk and
// the reserve, for a GPU run of `precision`.
int64_t estimate_activation_bytes(const model::ModelConfig& c, config::Precision precision,
                                  bool activation_checkpointing, int64_t micro_batch, int64_t seq_len);

// The parameter counts DeepSpeed's formulas take, from the weights table and the family's
// HF names: every HF tensor (ModelConfig::num_parameters, counted from the table), and
// DeepSpeed's largest_layer_params, the most one HF module holds directly (weight and bias
// together; the embedding for every model we know).
struct HfParameterCounts {
  int64_t total = 0;
  int64_t largest_module = 0;
};
HfParameterCounts hf_parameter_counts(const model::ModelConfig& c);
int64_t largest_hf_layer_params(const model::ModelConfig& c);

// The table `zerotrain estimate` prints, and its --json form:
// {"zerotrain": {"gpu_bytes_per_gpu", "cpu_bytes_per_node", "activation_bytes_per_gpu", ...},
//  "deepspeed": {"gpu_bytes_per_gpu", "cpu_bytes_per_node", "formula"}, "inputs": {...}}.
std::string describe_estimate(const EstimateInput& in, const MemoryEstimate& e);
nlohmann::json estimate_json(const EstimateInput& in, const MemoryEstimate& e);

}  // namespace zt::train
