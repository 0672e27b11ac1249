// ds_config "zero_optimization": every key is a row of config_keys_zero.cpp's table (read
// by detail::read_key); what stays here is what a row cannot say: the offload dicts, the
// deprecated booleans DeepSpeed maps onto them, and the checks between keys.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "config/config_keys.h"
#include "config/ds_config_internal.h"

namespace zt::config::detail {

using nlohmann::json;

namespace {

const char* kFix = "see docs/configs.md#zero_optimization";
constexpr int64_t kMaxOffloadBuffers = 1024;

OffloadDevice parse_device(const json& obj, const Where& w) {
  auto it = obj.find("device");
  if (it == obj.end() || it->is_null()) return OffloadDevice::None;
  const std::string d = read_string(obj, "device", w, "none").value;
  const std::string l = lower(d);
  if (l == "none") return OffloadDevice::None;
  if (l == "cpu") return OffloadDevice::CPU;
  if (l == "nvme") return OffloadDevice::NVMe;
  ZT_THROW_INPUT(w.key("device").str(), ": '", d, "' is not one of none, cpu, nvme",
                 did_you_mean(l, {"none", "cpu", "nvme"}));
}

// Reads the dict `key` (offload_optimizer or offload_param) into `o`, whose defaults are
// DeepSpeed's; returns whether it was written.
template <class Options>
Given parse_offload(const json& z, const std::string& key, const Where& zw, Options& o) {
  constexpr bool param = std::is_same_v<Options, zero::OffloadParamOptions>;
  auto it = z.find(key);
  if (it == z.end() || it->is_null()) return Given::Absent;
  const Where w = zw.key(key);
  std::vector<std::string> known = {"device", "nvme_path", "buffer_count", "pin_memory"};
  if constexpr (param) {
    known.insert(known.end(), {"buffer_size", "max_in_cpu"});
  } else {
    known.insert(known.end(), {"pipeline_read", "pipeline_write", "fast_init", "ratio", "pipeline"});
  }
  check_known_keys(*it, known, w, std::string(kFix));
  o.device = parse_device(*it, w);
  o.nvme_path = read_string(*it, "nvme_path", w, "").value;
  // Each buffer is a host allocation of a whole swapped piece: bounded before it is kept
  // in an int or multiplied by a piece size (DeepSpeed's defaults are 4 and 5).
  const int64_t buffer_count = read_int(*it, "buffer_count", w, o.buffer_count).value;
  if (buffer_count > kMaxOffloadBuffers)
    ZT_THROW_INPUT(w.key("buffer_count").str(), ": ", buffer_count, " is too large; at most ", kMaxOffloadBuffers,
                   " swap buffers (each holds a whole swapped piece in host memory)");
  o.buffer_count = static_cast<int>(std::max<int64_t>(buffer_count, INT32_MIN));
  o.pin_memory = read_bool(*it, "pin_memory", w, true).value;
  if constexpr (param) {
    o.buffer_size = read_int(*it, "buffer_size", w, o.buffer_size).value;
    o.max_in_cpu = read_int(*it, "max_in_cpu", w, o.max_in_cpu).value;
    if (o.buffer_count < 1 || o.buffer_size < 1 || o.max_in_cpu < 0)
      ZT_THROW_INPUT(w.str(), ": buffer_count and buffer_size must be positive, max_in_cpu not negative");
  } else {
    o.pipeline_read = read_bool(*it, "pipeline_read", w, false).value;
    o.pipeline_write = read_bool(*it, "pipeline_write", w, false).value;
    read_bool(*it, "pipeline", w, false);
    o.fast_init = read_bool(*it, "fast_init", w, false).value;
    o.ratio = read_number(*it, "ratio", w, 1.0).value;
    if (o.buffer_count < 1)
      ZT_THROW_INPUT(w.str(), ": buffer_count and buffer_size must be positive, max_in_cpu not negative");
    if (!(o.ratio > 0 && o.ratio <= 1)) ZT_THROW_INPUT(w.key("ratio").str(), ": must be in (0, 1]");
  }
  if (o.device == OffloadDevice::NVMe && o.nvme_path.empty())
    ZT_THROW_INPUT(w.key("nvme_path").str(),
                   ": device is nvme but nvme_path is missing; set it to a directory on a local NVMe drive");
  return Given::Set;
}

}  // namespace

void parse_zero_section(const json& doc, const Where& top, DsConfig& ds) {
  auto it = doc.find("zero_optimization");
  if (it == doc.end() || it->is_null()) return;
  const Where w = top.key("zero_optimization");
  check_known_keys(*it, key_spellings(zero_keys()), w, kFix);
  ds.has_zero_section = true;
  json z = *it;
  move_aliases(zero_keys(), z, [&](const std::string& alias, const std::string& key) {
    ZT_THROW_INPUT(w.str(), ": both '", alias, "' and '", key, "' are given (the same setting); keep '", key, "'");
  });
  const int64_t stage = read_int(z, "stage", w, 0).value;
  if (stage < 0 || stage > 3) ZT_THROW_INPUT(w.key("stage").str(), ": ZeRO stage must be 0, 1, 2 or 3, got ", stage);
  for (const ZeroKey& k : zero_keys()) read_key(k, z, w, ds.zero, ds.zero_given);
  ds.stage = ds.zero.stage;

  // Offload dicts, and the deprecated booleans DeepSpeed still maps onto them.
  ZeroSection& zs = ds.zero;
  ds.offload_optimizer_given = parse_offload(z, "offload_optimizer", w, zs.offload_optimizer);
  ds.offload_param_given = parse_offload(z, "offload_param", w, zs.offload_param);
  const bool cpu_offload = read_bool(z, "cpu_offload", w, false).value;
  const bool cpu_offload_param = read_bool(z, "cpu_offload_param", w, false).value;
  const auto pin = read_bool(z, "cpu_offload_use_pin_memory", w, true);
  if (cpu_offload) {
    if (ds.offload_optimizer_given == Given::Set)
      ZT_THROW_INPUT(w.key("cpu_offload").str(),
                     ": deprecated spelling of offload_optimizer.device=cpu, and offload_optimizer is also given; keep "
                     "offload_optimizer");
    ds.offload_optimizer_given = Given::Set;
    zs.offload_optimizer.device = OffloadDevice::CPU;
    if (pin.is_set()) zs.offload_optimizer.pin_memory = pin.value;
  }
  if (cpu_offload_param) {
    if (ds.offload_param_given == Given::Set)
      ZT_THROW_INPUT(
          w.key("cpu_offload_param").str(),
          ": deprecated spelling of offload_param.device=cpu, and offload_param is also given; keep offload_param");
    ds.offload_param_given = Given::Set;
    zs.offload_param.device = OffloadDevice::CPU;
    if (pin.is_set()) zs.offload_param.pin_memory = pin.value;
  }
  if (zs.offload_param.device != OffloadDevice::None && stage != 3)
    ZT_THROW_INPUT(w.key("offload_param").str(), ": parameter offload needs ZeRO stage 3 (stage is ", stage,
                   "); set zero_optimization.stage to 3 or remove offload_param");
  if (zs.offload_optimizer.device != OffloadDevice::None && stage == 0)
    ZT_THROW_INPUT(
        w.key("offload_optimizer").str(),
        ": optimizer offload needs ZeRO stage 1, 2 or 3; set zero_optimization.stage or remove offload_optimizer");
}

}  // namespace zt::config::detail
