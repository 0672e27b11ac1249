#include "checkpoint/checkpoint_validate.h"
#include "core/strings.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/error.h"
#include "ops/elementwise.h"

namespace zt::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Bounds far above any real model (a 2^40-element unit is 4 TiB of f32) that keep every
// product and sum below int64 overflow.
constexpr int64_t kMaxElements = int64_t{1} << 40;
constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max() / 4;

// Field readers: each names the file and the field path in its error.
struct Fields {
  const std::string& path;

  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    ZT_THROW_INPUT("'", path, "': field '", field, "' ", what,
                   " (a damaged or hand-edited manifest? resume from another checkpoint, or re-save it)");
  }

  const json& at(const json& j, const char* key, const std::string& field) const {
    if (!j.is_object() || !j.contains(key)) bad(field, "is missing");
    return j.at(key);
  }

  int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) bad(field, "must be an integer (got " + v.dump() + ")");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
      bad(field, "is " + v.dump() + ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      bad(field, "is " + std::to_string(x) + ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }

  int64_t integer(const json& j, const char* key, const std::string& field, int64_t lo, int64_t hi) const {
    return integer(at(j, key, field), field, lo, hi);
  }

  int64_t integer_or(const json& j, const char* key, const std::string& field, int64_t lo, int64_t hi,
                     int64_t fallback) const {
    if (!j.is_object() || !j.contains(key)) return fallback;
    return integer(j.at(key), field, lo, hi);
  }

  uint64_t unsigned_integer(const json& j, const char* key, const std::string& field) const {
    const json& v = at(j, key, field);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      bad(field, "must be a non-negative integer (got " + v.dump() + ")");
    return v.get<uint64_t>();
  }

  std::string string(const json& j, const char* key, const std::string& field) const {
    const json& v = at(j, key, field);
    if (!v.is_string() || v.get<std::string>().empty()) bad(field, "must be a non-empty string (got " + v.dump() + ")");
    return v.get<std::string>();
  }

  const json& array(const json& j, const char* key, const std::string& field) const {
    const json& v = at(j, key, field);
    if (!v.is_array()) bad(field, "must be an array");
    return v;
  }
};

std::string unit_of_tensor(const std::string& tensor) {
  const size_t dot = tensor.rfind('.');
  return dot == std::string::npos ? tensor : tensor.substr(0, dot);
}

void read_units(const Fields& f, const json& j, CheckpointManifest& m) {
  const json& units = f.array(j, "units", "units");
  if (units.empty()) f.bad("units", "is empty");
  std::set<std::string> names;
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string uf = "units[" + std::to_string(i) + "]";
    const json& ju = units[i];
    if (!ju.is_object()) f.bad(uf, "must be an object");
    ManifestUnit u;
    u.name = f.string(ju, "name", uf + ".name");
    if (!names.insert(u.name).second) f.bad(uf + ".name", "repeats unit '" + u.name + "'");
    u.numel = f.integer(ju, "numel", uf + ".numel", 0, kMaxElements);
    // The saving run padded max(numel, 1) up to a multiple of its shard count, a multiple
    // of its world size (never 0); each rank's slice is padded_numel / world_size.
    const int64_t W = m.world_size, base = std::max<int64_t>(u.numel, 1);
    u.padded_numel = f.integer(ju, "padded_numel", uf + ".padded_numel", 1, 2 * kMaxElements);
    if (u.padded_numel < base || u.padded_numel % W != 0)
      f.bad(uf + ".padded_numel", "is " + std::to_string(u.padded_numel) + "; it must be a multiple of world_size " +
                                      std::to_string(W) + " and at least max(numel, 1) = " + std::to_string(base));
    u.part = u.padded_numel / W;
    const json& params = f.array(ju, "params", uf + ".params");
    int64_t end = 0;
    for (size_t k = 0; k < params.size(); ++k) {
      const std::string pf = uf + ".params[" + std::to_string(k) + "]";
      ManifestParam p;
      p.name = f.string(params[k], "name", pf + ".name");
      p.offset = f.integer(params[k], "offset", pf + ".offset", 0, kMaxElements);
      const json& shape = f.array(params[k], "shape", pf + ".shape");
      int64_t n = 1;
      for (size_t d = 0; d < shape.size(); ++d) {
        const int64_t dim = f.integer(shape[d], pf + ".shape[" + std::to_string(d) + "]", 0, kMaxElements);
        p.shape.push_back(dim);
        n = dim == 0 || n == 0 ? 0 : (n > kMaxElements / dim ? kMaxElements + 1 : n * dim);
      }
      if (p.offset < end)
        f.bad(pf + ".offset", "overlaps the previous parameter (ends at " + std::to_string(end) + ")");
      if (n > u.numel || p.offset > u.numel - n)
        f.bad(pf, shape_str(p.shape) + " at offset " + std::to_string(p.offset) + " lies past the unit's numel " +
                      std::to_string(u.numel));
      end = p.offset + n;
      u.params.push_back(std::move(p));
    }
    m.units.push_back(std::move(u));
  }
}

void read_loss_scaler(const Fields& f, const json& j, CheckpointManifest& m) {
  if (!j.contains("loss_scaler") || j.at("loss_scaler").is_null()) return;
  const json& ls = j.at("loss_scaler");
  if (!ls.is_object()) f.bad("loss_scaler", "must be null or an object");
  if (ls.empty()) return;
  const json& scale = f.at(ls, "scale", "loss_scaler.scale");
  if (!scale.is_number() || !std::isfinite(scale.get<double>()) || scale.get<double>() <= 0 ||
      scale.get<double>() > 3.4e38)
    f.bad("loss_scaler.scale", "must be a positive finite number (got " + scale.dump() + ")");
  f.integer(ls, "hysteresis_left", "loss_scaler.hysteresis_left", 0, std::numeric_limits<int>::max());
  f.integer(ls, "clean_steps", "loss_scaler.clean_steps", 0, kMaxCount);
  f.integer(ls, "skipped_steps", "loss_scaler.skipped_steps", 0, m.step);
  m.loss_scaler = ls;
}

}  // namespace

const ManifestUnit* CheckpointManifest::find_unit(const std::string& name) const {
  for (const ManifestUnit& u : units)
    if (u.name == name) return &u;
  return nullptr;
}

std::string CheckpointManifest::shard_path(int rank) const {
  return (fs::path(dir) / ("shard_rank" + std::to_string(rank) + ".safetensors")).string();
}

CheckpointManifest read_checkpoint_manifest(const std::string& dir) {
  CheckpointManifest m;
  m.dir = dir;
  m.path = (fs::path(dir) / "manifest.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(m.path, ec))
    ZT_THROW_INPUT("'", m.path, "' does not exist or is not a file: not a complete checkpoint");
  // A manifest is a few hundred KiB at most; a huge one is not ours.
  if (fs::file_size(m.path, ec) > (uint64_t{64} << 20))
    ZT_THROW_INPUT("'", m.path, "' is larger than 64 MiB: not a zerotrain checkpoint manifest");
  json j;
  {
    std::ifstream in(m.path);
    if (!in) ZT_THROW_INPUT("cannot read '", m.path, "'");
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      ZT_THROW_INPUT("'", m.path, "' is not valid JSON (", e.what(), "): truncated or damaged");
    }
  }
  const Fields f{m.path};
  if (!j.is_object() || !j.contains("format") || j.at("format") != kCheckpointFormat)
    ZT_THROW_INPUT("'", m.path, "' is not a zerotrain checkpoint manifest (no \"format\": \"", kCheckpointFormat,
                   "\")");
  // Every field a resume restores is required: version 1 has written all of them since
  // its first release, so a manifest without one is damaged or hand-edited, and a default
  // (data position 0, micro step 0, seed 0) would resume silently on other data, dropout
  // masks or state. Only extra.optimizer_steps came later (fp16 skipped steps): without
  // it the step count is the update count, as it was before.
  const int64_t version = f.integer(j, "version", "version", 0, std::numeric_limits<int>::max());
  if (version != kCheckpointVersion)
    f.bad("version",
          "is " + std::to_string(version) + "; this zerotrain reads version " + std::to_string(kCheckpointVersion));
  m.world_size = static_cast<int>(f.integer(j, "world_size", "world_size", 1, kMaxCheckpointWorldSize));
  m.zero_stage = static_cast<int>(f.integer(j, "zero_stage", "zero_stage", 0, 3));
  m.step = f.integer(j, "step", "step", 0, kMaxCount);
  m.micro_steps = f.integer(j, "micro_steps", "micro_steps", 0, kMaxCount);
  const std::string dt = f.string(j, "param_dtype", "param_dtype");
  if (dt != "f32" && dt != "bf16" && dt != "f16") f.bad("param_dtype", "is '" + dt + "'; expected f32, bf16 or f16");
  m.param_dtype = parse_dtype(dt);
  read_units(f, j, m);

  const json& os = f.array(j, "optimizer_state", "optimizer_state");
  for (size_t i = 0; i < os.size(); ++i) {
    const std::string field = "optimizer_state[" + std::to_string(i) + "]";
    if (!os[i].is_string()) f.bad(field, "must be a string");
    const std::string name = os[i].get<std::string>();
    if (name.find('.') == std::string::npos || !m.find_unit(unit_of_tensor(name)) || ends_with(name, ".params"))
      f.bad(field, "is '" + name + "', not '<unit>.<state>' of a unit in 'units'");
    m.optimizer_state.push_back(name);
  }
  const json& d = f.at(j, "data", "data");
  if (!d.is_object()) f.bad("data", "must be an object");
  m.data_epoch = f.unsigned_integer(d, "epoch", "data.epoch");
  m.data_position = f.unsigned_integer(d, "position", "data.position");
  m.seed = f.unsigned_integer(j, "seed", "seed");
  f.at(j, "loss_scaler", "loss_scaler");  // null without fp16, but always written
  read_loss_scaler(f, j, m);
  m.extra = json::object();
  if (!f.at(j, "extra", "extra").is_null()) {
    if (!j.at("extra").is_object()) f.bad("extra", "must be an object");
    m.extra = j.at("extra");
    f.integer_or(m.extra, "optimizer_steps", "extra.optimizer_steps", 0, m.step, 0);
    f.integer_or(m.extra, "total_steps", "extra.total_steps", 0, kMaxCount, 0);
    if (m.extra.contains("model_config")) {
      if (!m.extra.at("model_config").is_object()) f.bad("extra.model_config", "must be an object");
      m.model_config = m.extra.at("model_config");
    }
  }
  return m;
}

void check_manifest_layout(const CheckpointManifest& m, const model::ParameterRegistry& registry,
                           const std::string& hint) {
  if (m.units.size() != registry.size())
    ZT_THROW_INPUT(m.path, ": the checkpoint has ", m.units.size(), " units, this model has ", registry.size(), hint);
  for (size_t i = 0; i < registry.size(); ++i) {
    const model::Unit& u = registry.unit(i);
    const ManifestUnit& mu = m.units[i];
    if (mu.name != u.name() || mu.numel != u.numel() || mu.params.size() != u.params().size())
      ZT_THROW_INPUT(m.path, ": unit ", i, " is '", mu.name, "' with ", mu.numel, " elements in ", mu.params.size(),
                     " parameters; this model has '", u.name(), "' with ", u.numel(), " in ", u.params().size(), hint);
    for (size_t k = 0; k < mu.params.size(); ++k) {
      const ManifestParam& mp = mu.params[k];
      const model::ParamEntry& p = u.params()[k];
      if (mp.name != p.name() || mp.offset != p.offset || mp.shape != p.spec.shape)
        ZT_THROW_INPUT(m.path, ": unit '", mu.name, "' parameter ", k, " is ", mp.name, " ", shape_str(mp.shape),
                       " at offset ", mp.offset, "; this model has ", p.name(), " ", shape_str(p.spec.shape),
                       " at offset ", p.offset, hint);
    }
  }
}

void check_shards_present(const CheckpointManifest& m) {
  for (int r = 0; r < m.world_size; ++r) {
    std::error_code ec;
    if (!fs::is_regular_file(m.shard_path(r), ec))
      ZT_THROW_INPUT("checkpoint '", m.dir, "' is missing rank ", r, "'s shard ",
                     fs::path(m.shard_path(r)).filename().string(), " (it was saved by ", m.world_size,
                     " ranks): copy every rank's shard_rank<r>.safetensors into the directory");
  }
}

DType expected_shard_dtype(const CheckpointManifest& m, const std::string& tensor, bool* any_float) {
  *any_float = false;
  if (ends_with(tensor, ".params")) return m.param_dtype;
  if (ends_with(tensor, ".master")) return DType::F32;
  *any_float = true;  // optimizer state: f32, or 16-bit with master_weights: false
  return DType::F32;
}

Tensor checked_shard_tensor(const CheckpointManifest& m, const io::SafetensorsReader& shard, const std::string& tensor,
                            int rank) {
  const ManifestUnit* u = m.find_unit(unit_of_tensor(tensor));
  ZT_CHECK(u != nullptr, "checked_shard_tensor: '", tensor, "' names no unit of ", m.path);
  ZT_CHECK(rank >= 0 && rank < m.world_size, "checked_shard_tensor: rank ", rank, " outside the world size");
  if (!shard.contains(tensor))
    ZT_THROW_INPUT("'", shard.path(), "' has no tensor '", tensor,
                   "' (saved with another optimizer or precision, an incomplete shard, or not from this manifest?)");
  const io::TensorInfo& info = shard.info(tensor);
  bool any_float = false;
  const DType want = expected_shard_dtype(m, tensor, &any_float);
  const bool dtype_ok = info.supported && (any_float ? is_floating(info.dtype) : info.dtype == want);
  if (!dtype_ok || info.shape != Shape{u->part})
    ZT_THROW_INPUT("'", shard.path(), "': tensor '", tensor, "' is ", info.dtype_name, " ", shape_str(info.shape),
                   "; the manifest says ", any_float ? std::string("a float type") : std::string(dtype_name(want)),
                   " [", u->part, "] (rank ", rank, "'s slice; shards of another checkpoint mixed in, or damaged?)");
  return shard.tensor(tensor);
}

void check_loaded_finite(const std::string& shard_path, const std::string& tensor, const Tensor& piece) {
  if (piece.numel() == 0 || ops::all_finite(piece)) return;
  ZT_THROW_INPUT("'", shard_path, "': tensor '", tensor,
                 "' holds non-finite values (NaN or Inf): this checkpoint's weights or optimizer state are "
                 "broken (saved by a run that diverged, or damaged); resume from an earlier checkpoint "
                 "(--resume DIR)");
}

void check_saved_finite(const std::string& tensor, const Tensor& data) {
  if (data.numel() == 0 || ops::all_finite(data)) return;
  ZT_THROW_INPUT("tensor '", tensor,
                 "' holds non-finite values (NaN or Inf): a checkpoint of non-finite weights or state is not "
                 "saved, and the earlier checkpoints are kept (the weights went non-finite: a learning rate too "
                 "high, or damaged optimizer state; resume from the newest checkpoint with a lower learning rate)");
}

bool checkpoint_complete(const std::string& dir, std::string* why) {
  try {
    const CheckpointManifest m = read_checkpoint_manifest(dir);
    check_shards_present(m);
    // Each shard is opened (its header must describe exactly the bytes the file holds, so
    // a truncated or cut-short copy fails here) and every tensor a resume reads is checked
    // for its dtype and length: a shard that is present but damaged makes the checkpoint
    // incomplete, and `--resume auto` falls back past it instead of failing at the load.
    for (int r = 0; r < m.world_size; ++r) {
      const io::SafetensorsReader shard(m.shard_path(r));
      for (const ManifestUnit& u : m.units) checked_shard_tensor(m, shard, u.name + ".params", r);
      for (const std::string& state : m.optimizer_state) checked_shard_tensor(m, shard, state, r);
    }
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace zt::checkpoint
