#include "train/estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "backend/cross_entropy_kernels.h"
#include "config/config_dump.h"
#include "core/error.h"
#include "core/memory_info.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "train/lora_setup.h"
#include "zero/engine.h"

namespace zt::train {

namespace {

// DeepSpeed 0.19's estimate_zero2_model_states_mem_needs (stages 1 and 2): (cpu, gpu).
std::pair<double, double> deepspeed_zero2(double total_params, int gpus_per_node, int nodes, bool cpu_offload,
                                          double buffer_factor) {
  const double total_gpus = static_cast<double>(nodes) * gpus_per_node;
  if (cpu_offload) return {total_params * std::max(4.0 * total_gpus, 16.0) * buffer_factor, 2.0 * total_params};
  return {total_params * 4.0 * gpus_per_node * buffer_factor,
          4.0 * total_params + static_cast<double>(static_cast<int64_t>(16.0 * total_params / total_gpus))};
}

// estimate_zero3_model_states_mem_needs with zero_init (zero.Init, HF's default under
// ZeRO-3): (cpu, gpu).
std::pair<double, double> deepspeed_zero3(double total_params, double largest_layer_params, int gpus_per_node,
                                          int nodes, bool cpu_offload, bool cpu_offload_params, double buffer_factor) {
  const double total_gpus = static_cast<double>(nodes) * gpus_per_node, gpus_factor = 1.0 / nodes;
  const double largest_layer_memory = 4.0 * largest_layer_params;
  if (cpu_offload && cpu_offload_params)
    return {total_params * 18.0 * gpus_factor * buffer_factor, largest_layer_memory};
  if (cpu_offload)
    return {total_params * 16.0 * gpus_factor * buffer_factor,
            largest_layer_memory + static_cast<double>(static_cast<int64_t>(2.0 * total_params / total_gpus))};
  return {largest_layer_params * 4.0 * gpus_per_node * buffer_factor,
          largest_layer_memory + static_cast<double>(static_cast<int64_t>(18.0 * total_params / total_gpus))};
}

void check_input(const EstimateInput& in) {
  if (in.stage < 0 || in.stage > 3) ZT_THROW_INPUT("--stage ", in.stage, ": a ZeRO stage is 0, 1, 2 or 3");
  if (in.gpus_per_node < 1) ZT_THROW_INPUT("--gpus-per-node ", in.gpus_per_node, ": give at least 1");
  if (in.nodes < 1) ZT_THROW_INPUT("--nodes ", in.nodes, ": give at least 1");
  if (in.micro_batch < 1) ZT_THROW_INPUT("--micro-batch ", in.micro_batch, ": give at least 1");
  if (in.seq_len < 1 || in.seq_len > in.model.max_position_embeddings)
    ZT_THROW_INPUT("--seq-len ", in.seq_len, ": give 1..", in.model.max_position_embeddings,
                   " (the model's max_position_embeddings)");
  if (in.offload_optimizer != config::OffloadDevice::None && in.stage == 0)
    ZT_THROW_INPUT("--offload-optimizer ", config::offload_device_name(in.offload_optimizer),
                   ": optimizer offload needs ZeRO stage 1, 2 or 3; give --stage");
  if (in.offload_param != config::OffloadDevice::None && in.stage != 3)
    ZT_THROW_INPUT("--offload-param ", config::offload_device_name(in.offload_param), ": parameter offload needs --stage 3");
  if (!(in.additional_buffer_factor > 0))
    ZT_THROW_INPUT("--additional-buffer-factor: give a positive factor (DeepSpeed's default is 1.5)");
}

}  // namespace

HfParameterCounts hf_parameter_counts(const model::ModelConfig& c) {
  // The weights table's HF tensors (as HF's files hold them: the unpadded vocabulary; a
  // tied head is no tensor), each block's once per layer; a module is a tensor name
  // without its last component (".weight", ".bias"), as named_modules() groups them.
  HfParameterCounts counts;
  for (const model::UnitKind kind : {model::UnitKind::Embed, model::UnitKind::Block, model::UnitKind::Head}) {
    std::map<std::string, int64_t> modules;
    model::for_each_weight(c, kind, 0, [&](const model::ParamSpec& s) {
      modules[s.name.substr(0, s.name.rfind('.'))] += shape_numel(s.hf_shape);
    });
    const int64_t copies = kind == model::UnitKind::Block ? c.num_layers : 1;
    for (const auto& [name, n] : modules) {
      counts.total += n * copies;
      counts.largest_module = std::max(counts.largest_module, n);
    }
  }
  return counts;
}

int64_t largest_hf_layer_params(const model::ModelConfig& c) { return hf_parameter_counts(c).largest_module; }

int64_t estimate_activation_bytes(const model::ModelConfig& c, config::Precision precision, bool activation_checkpointing,
                                  int64_t micro_batch, int64_t seq_len) {
  const bool f32 = precision == config::Precision::F32;
  const int64_t es = f32 ? 4 : 2;
  const DType act = f32 ? DType::F32 : precision == config::Precision::F16 ? DType::F16 : DType::BF16;
  const auto ck = activation_checkpointing ? model::Checkpointing::EveryBlock : model::Checkpointing::None;
  const int64_t N = micro_batch * seq_len, C = c.hidden_size, V = c.vocab_size;
  const LmHeadChunkPlan head = lm_head_chunk_plan(N, V, C, es, !f32, 0);
  return model::activation_bytes(c, act, ck, micro_batch, seq_len) + head.workspace_bytes(C, es, es, V) +
         kGpuReserveBytes;
}

MemoryEstimate estimate_memory(const EstimateInput& in) {
  check_input(in);
  MemoryEstimate e;
  e.world = in.gpus_per_node * in.nodes;
  // One process has nothing to divide: stages 1-3 run as stage 0 (docs/zero.md).
  // Parameter offload (with the optimizer's, at stage 3) keeps stage 3: the host
  // partitions are what it saves.
  const bool params_home_host = in.stage == 3 && in.offload_param != config::OffloadDevice::None &&
                                in.offload_optimizer != config::OffloadDevice::None;
  e.effective_stage = e.world == 1 && !params_home_host ? 0 : in.stage;
  const int stage = e.effective_stage;

  // The units as zerotrain builds them, without their memory.
  model::ModelOptions mo;
  mo.allocate_params = false;
  mo.allocate_grads = false;
  mo.shard_count = e.world;
  if (in.lora) mo.lora = model::lora_model_options(*in.lora, in.model, in.lora_source);
  const model::Transformer shapes(in.model, mo);
  for (const auto& u : shapes.registry().units()) {
    e.padded_elements += u->padded_numel();
    e.largest_unit_elements = std::max(e.largest_unit_elements, u->padded_numel());
    if (u->frozen()) continue;
    e.trainable_elements += u->padded_numel();
    e.largest_trainable_unit_elements = std::max(e.largest_trainable_unit_elements, u->padded_numel());
  }
  const HfParameterCounts hf = hf_parameter_counts(in.model);
  e.hf_parameters = hf.total;
  e.largest_layer_params = hf.largest_module;

  const bool f32 = in.precision == config::Precision::F32;
  const int param_bytes = f32 ? 4 : 2;
  const int moments = 8;                                // AdamW: two f32 moments
  const int optimizer_bytes = moments + (f32 ? 0 : 4);  // + the f32 master of 16-bit parameters
  const int64_t P = e.padded_elements, W = e.world;
  // Gradients and optimizer state exist for the trainable units only (a LoRA run's
  // adapters; every unit otherwise).
  const int64_t Pt = e.trainable_elements;
  const bool off_opt = in.offload_optimizer != config::OffloadDevice::None;
  const bool off_param = in.offload_param != config::OffloadDevice::None;
  // Per rank, as the engine divides them.
  const int64_t params = stage >= 3 ? P * param_bytes / W : P * param_bytes;
  const int64_t grads = stage >= 2 ? Pt * 4 / W : Pt * param_bytes;  // stages 2-3: f32 partitions
  const int64_t optimizer = stage >= 1 ? Pt * optimizer_bytes / W : Pt * optimizer_bytes;
  if (Pt == P)
    ZT_CHECK(params + grads + optimizer ==
                 zero::zero_formula_bytes(stage, P, static_cast<int>(W), param_bytes, param_bytes, 4, optimizer_bytes),
             "estimate: the engine's division changed");
  // Optimizer offload (zero/offload_optimizer.h) moves the state to the host and stages a
  // copy of the rank's gradient partition and 16-bit parameters there; the GPU keeps its
  // parameters and gradients.
  const int64_t owned = stage >= 1 ? Pt / W : Pt;  // the partitions the host optimizer updates
  // With parameter offload the host optimizer updates the parameters' host partitions in
  // place: only the gradients are staged.
  const int64_t staging = owned * ((stage >= 2 ? 4 : param_bytes) + (params_home_host ? 0 : param_bytes));
  // offload_param alone leaves the parameters on the GPU (a run warns).
  const bool params_off_gpu = params_home_host;
  e.gpu_model_states = (params_off_gpu ? 0 : params) + grads + (off_opt ? 0 : optimizer);
  // Parameters on NVMe (zero/param_store.h): the first max_in_cpu elements of the rank's
  // slices stay in host memory, the rest are on the drive and pass through buffer_count
  // swap buffers of the largest unit's slice.
  int64_t host_params = params_off_gpu ? params : 0, nvme_params = 0;
  if (params_off_gpu && in.offload_param == config::OffloadDevice::NVMe) {
    const int64_t slice_elements = P / W;
    const int64_t resident = std::min(slice_elements, std::max<int64_t>(0, in.offload_param_max_in_cpu));
    nvme_params = (slice_elements - resident) * param_bytes;
    const int64_t largest_slice = (e.largest_unit_elements + W - 1) / W;
    host_params = resident * param_bytes +
                  (nvme_params > 0 ? in.offload_param_buffer_count * largest_slice * param_bytes : 0);
  }
  // Optimizer state on NVMe (zero/state_store.h): the drive holds it; the host holds
  // DeepSpeed's default 4 swap buffers of the largest piece (a unit's partition, at most the
  // default sub_group_size of 1e9 elements), each tensor padded to 4 KiB.
  const bool opt_nvme = in.offload_optimizer == config::OffloadDevice::NVMe;
  const int64_t piece =
      std::min<int64_t>(stage >= 1 ? (e.largest_trainable_unit_elements + W - 1) / W : e.largest_trainable_unit_elements,
                        1000000000);
  const int64_t swap_buffers = 4 * piece * optimizer_bytes;
  const int64_t host_optimizer = opt_nvme ? swap_buffers : optimizer;
  const int64_t host_per_rank = host_params + (off_opt ? host_optimizer + staging : 0);
  e.cpu_bytes_per_node = host_per_rank * in.gpus_per_node;
  e.nvme_bytes_per_node = ((opt_nvme ? optimizer : 0) + nvme_params) * in.gpus_per_node;
  // Transient: a unit's full gradient buffer while it is reduced (stages 2-3), and at
  // stage 3 the unit in use and the one prefetched.
  if (stage >= 2) e.gpu_transient += e.largest_trainable_unit_elements * param_bytes;
  if (stage >= 3) e.gpu_transient += 2 * e.largest_unit_elements * param_bytes;

  e.gpu_activations =
      estimate_activation_bytes(in.model, in.precision, in.activation_checkpointing, in.micro_batch, in.seq_len);

  // DeepSpeed's formulas, on HF's parameter count.
  const double n = static_cast<double>(e.hf_parameters);
  std::pair<double, double> ds;
  if (in.stage <= 2) {
    ds = deepspeed_zero2(n, in.gpus_per_node, in.nodes, off_opt, in.additional_buffer_factor);
    e.deepspeed_formula =
        "estimate_zero2_model_states_mem_needs(cpu_offload=" + std::string(off_opt ? "True" : "False") + ")";
  } else {
    ds = deepspeed_zero3(n, static_cast<double>(e.largest_layer_params), in.gpus_per_node, in.nodes, off_opt, off_param,
                         in.additional_buffer_factor);
    e.deepspeed_formula =
        "estimate_zero3_model_states_mem_needs(cpu_offload=" + std::string(off_opt ? "True" : "False") +
        ", cpu_offload_params=" + (off_param ? "True" : "False") + ", zero_init=True)";
  }
  e.deepspeed_cpu_bytes_per_node = static_cast<int64_t>(ds.first);
  e.deepspeed_gpu_bytes_per_gpu = static_cast<int64_t>(ds.second);
  return e;
}

nlohmann::json estimate_json(const EstimateInput& in, const MemoryEstimate& e) {
  nlohmann::json j;
  j["inputs"] = {{"model", in.model_name},
                 {"stage", in.stage},
                 {"effective_stage", e.effective_stage},
                 {"gpus_per_node", in.gpus_per_node},
                 {"nodes", in.nodes},
                 {"micro_batch", in.micro_batch},
                 {"seq_len", in.seq_len},
                 {"activation_checkpointing", in.activation_checkpointing},
                 {"precision", config::precision_name(in.precision)},
                 {"offload_optimizer", config::offload_device_name(in.offload_optimizer)},
                 {"offload_param", config::offload_device_name(in.offload_param)},
                 {"parameters", e.hf_parameters},
                 {"largest_layer_params", e.largest_layer_params},
                 {"trainable_parameters", e.trainable_elements},
                 {"lora", in.lora ? model::lora_config_to_peft_json(*in.lora) : nlohmann::json(nullptr)},
                 {"additional_buffer_factor", in.additional_buffer_factor}};
  j["zerotrain"] = {{"gpu_bytes_per_gpu", e.gpu_bytes_per_gpu()},
                    {"cpu_bytes_per_node", e.cpu_bytes_per_node},
                    {"nvme_bytes_per_node", e.nvme_bytes_per_node},
                    {"activation_bytes_per_gpu", e.gpu_activations},
                    {"model_state_bytes_per_gpu", e.gpu_model_states},
                    {"transient_bytes_per_gpu", e.gpu_transient}};
  j["deepspeed"] = {{"gpu_bytes_per_gpu", e.deepspeed_gpu_bytes_per_gpu},
                    {"cpu_bytes_per_node", e.deepspeed_cpu_bytes_per_node},
                    {"formula", e.deepspeed_formula}};
  return j;
}

std::string describe_estimate(const EstimateInput& in, const MemoryEstimate& e) {
  auto gib = [](int64_t b) { return bytes_str(static_cast<double>(b)); };
  char line[512];
  std::string s;
  std::snprintf(line, sizeof line, "model %s: %.4g parameters (largest HF layer %.4g), %s\n", in.model_name.c_str(),
                static_cast<double>(e.hf_parameters), static_cast<double>(e.largest_layer_params),
                config::precision_name(in.precision));
  s += line;
  if (in.lora) {
    std::snprintf(line, sizeof line,
                  "LoRA r %lld (%s): a frozen base; gradients and optimizer state for %.4g adapter elements only\n",
                  static_cast<long long>(in.lora->r), in.lora_source.c_str(), static_cast<double>(e.trainable_elements));
    s += line;
  }
  std::snprintf(line, sizeof line,
                "ZeRO stage %d over %d GPU(s) (%d node(s) x %d)%s; offload_optimizer %s, offload_param %s; micro-batch "
                "%lld x %lld tokens, activation checkpointing %s\n\n",
                in.stage, e.world, in.nodes, in.gpus_per_node,
                e.effective_stage != in.stage ? " = stage 0 on one process" : "",
                config::offload_device_name(in.offload_optimizer), config::offload_device_name(in.offload_param),
                static_cast<long long>(in.micro_batch), static_cast<long long>(in.seq_len),
                in.activation_checkpointing ? "on" : "off");
  s += line;
  std::snprintf(line, sizeof line, "%-34s %14s %16s\n", "", "per GPU", "host, per node");
  s += line;
  std::snprintf(line, sizeof line, "%-34s %14s %16s\n", "zerotrain model states", gib(e.gpu_model_states).c_str(),
                gib(e.cpu_bytes_per_node).c_str());
  s += line;
  std::snprintf(line, sizeof line, "%-34s %14s %16s\n", "zerotrain transient (units)", gib(e.gpu_transient).c_str(),
                "-");
  s += line;
  std::snprintf(line, sizeof line, "%-34s %14s %16s\n", "zerotrain activations", gib(e.gpu_activations).c_str(), "-");
  s += line;
  std::snprintf(line, sizeof line, "%-34s %14s %16s\n", "zerotrain total", gib(e.gpu_bytes_per_gpu()).c_str(),
                gib(e.cpu_bytes_per_node).c_str());
  s += line;
  if (e.nvme_bytes_per_node > 0) {
    std::snprintf(line, sizeof line, "%-34s %14s %16s\n", "zerotrain state on NVMe", "-",
                  gib(e.nvme_bytes_per_node).c_str());
    s += line;
  }
  std::snprintf(line, sizeof line, "%-34s %14s %16s\n", "DeepSpeed (model states only)",
                gib(e.deepspeed_gpu_bytes_per_gpu).c_str(), gib(e.deepspeed_cpu_bytes_per_node).c_str());
  s += line;
  std::snprintf(line, sizeof line, "\nDeepSpeed: %s, additional_buffer_factor %.3g.\n", e.deepspeed_formula.c_str(),
                in.additional_buffer_factor);
  s += line;
  s += "zerotrain: what the engine and the step allocate (activations include the LM head's logits chunk and " +
       gib(kGpuReserveBytes) + " for workspaces); the host column is offloaded state only.\n";
  if (in.offload_param == config::OffloadDevice::NVMe && in.offload_optimizer != config::OffloadDevice::None)
    s += "note: offload_param nvme with DeepSpeed's defaults: each rank keeps its first max_in_cpu (1e9) parameter "
         "elements in host memory and swaps the rest through 5 buffers of the largest unit's slice.\n";
  if (in.lora) s += "note: DeepSpeed's formulas count a full fine-tune; with LoRA they are far above its model states.\n";
  if (in.offload_param != config::OffloadDevice::None && in.offload_optimizer == config::OffloadDevice::None)
    s += "note: offload_param takes effect only together with offload_optimizer (cpu or nvme): a run keeps these "
         "parameters in GPU memory.\n";
  return s;
}

}  // namespace zt::train
