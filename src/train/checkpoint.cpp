#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "io/safetensors.h"

namespace zt::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "zerotrain-checkpoint";
constexpr int kVersion = 1;

std::string step_dir_name(int64_t step) { return "global_step" + std::to_string(step); }

std::string shard_name(int rank) { return "shard_rank" + std::to_string(rank) + ".safetensors"; }

json unit_layout(const model::ParameterRegistry& registry) {
  json units = json::array();
  for (const auto& u : registry.units()) {
    json params = json::array();
    for (const auto& p : u->params())
      params.push_back({{"name", p.name()}, {"offset", p.offset}, {"shape", p.spec.shape}});
    units.push_back({{"name", u->name()}, {"numel", u->numel()}, {"padded_numel", u->padded_numel()},
                     {"params", params}});
  }
  return units;
}

// Elements [begin, begin + n) of a flat 1-D tensor.
Tensor flat_slice(const Tensor& flat, int64_t begin, int64_t n) { return flat.narrow(0, begin, n); }

void prune(const fs::path& root, int64_t keep_last, const std::string& newest) {
  if (keep_last <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("global_step", 0) != 0) continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 11, &end, 10);
    if (end && *end == '\0') found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  const int64_t excess = static_cast<int64_t>(found.size()) - keep_last;
  for (int64_t i = 0; i < excess; ++i) {
    if (found[static_cast<size_t>(i)].second.filename() == newest) continue;
    std::error_code ec;
    fs::remove_all(found[static_cast<size_t>(i)].second, ec);
    if (ec) ZT_WARN("could not remove old checkpoint ", found[static_cast<size_t>(i)].second.string(), ": ", ec.message());
  }
}

}  // namespace

std::string save_checkpoint(const std::string& root_str, const model::ParameterRegistry& registry,
                            const std::vector<std::pair<std::string, Tensor>>& optimizer_state,
                            const CheckpointState& state, const CheckpointWriteOptions& options) {
  const fs::path root(root_str);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) ZT_THROW_IO("cannot create checkpoint directory '", root.string(), "': ", ec.message());
  const std::string name = step_dir_name(state.step);
  const fs::path final_dir = root / name;
  const fs::path tmp_dir = root / ("." + name + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) ZT_THROW_IO("cannot create '", tmp_dir.string(), "': ", ec.message());

  try {
    const int W = options.world_size, r = options.rank;
    std::vector<io::TensorSource> sources;
    auto add = [&](const std::string& tensor_name, const Tensor& flat) {
      ZT_CHECK(flat.dim() == 1 && flat.size(0) % W == 0, "checkpoint tensor ", tensor_name,
               " is not a flat buffer divisible by the world size");
      const int64_t part = flat.size(0) / W;
      const Tensor slice = flat_slice(flat, r * part, part);
      sources.push_back({tensor_name, slice.dtype(), slice.shape(),
                         [slice](void* dst) { std::memcpy(dst, slice.data(), slice.nbytes()); }});
    };
    for (const auto& u : registry.units()) add(u->name() + ".params", u->flat_params());
    for (const auto& [tensor_name, t] : optimizer_state) add(tensor_name, t);
    io::write_safetensors((tmp_dir / shard_name(r)).string(), sources,
                          {{"format", kFormat}, {"rank", std::to_string(r)}});

    json manifest = {{"format", kFormat},
                     {"version", kVersion},
                     {"step", state.step},
                     {"micro_steps", state.micro_steps},
                     {"world_size", W},
                     {"zero_stage", options.zero_stage},
                     {"param_dtype", registry.units().empty() ? "f32" : dtype_name(registry.units()[0]->param_dtype())},
                     {"units", unit_layout(registry)},
                     {"optimizer_state", json::array()},
                     {"data", {{"epoch", state.data_epoch}, {"position", state.data_position}}},
                     {"seed", state.seed},
                     {"loss_scaler", state.loss_scaler},
                     {"extra", state.extra}};
    for (const auto& kv : optimizer_state) manifest["optimizer_state"].push_back(kv.first);
    if (r == 0) {
      const std::string text = manifest.dump(2) + "\n";
      io::write_file_atomic((tmp_dir / "manifest.json").string(),
                            [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
    }
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
  io::write_file_atomic((root / "latest").string(), [&](std::FILE* f) { std::fprintf(f, "%s\n", name.c_str()); });
  prune(root, options.keep_last, name);
  return final_dir.string();
}

std::string resolve_checkpoint(const std::string& root_or_dir, const std::string& which) {
  const fs::path p(root_or_dir);
  if (fs::exists(p / "manifest.json")) return p.string();
  const fs::path latest = p / "latest";
  if (which == "latest" || which.empty()) {
    std::ifstream in(latest);
    std::string name;
    if (!in || !(in >> name))
      ZT_THROW_INPUT("no checkpoint to resume from: '", latest.string(),
                     "' does not exist (train with checkpoints first, or drop --resume)");
    if (!fs::exists(p / name / "manifest.json"))
      ZT_THROW_INPUT("'", latest.string(), "' names '", name, "', which has no manifest.json (incomplete or deleted)");
    return (p / name).string();
  }
  if (fs::exists(p / which / "manifest.json")) return (p / which).string();
  ZT_THROW_INPUT("no checkpoint '", which, "' in '", p.string(), "'");
}

CheckpointState load_checkpoint(const std::string& dir, model::ParameterRegistry& registry,
                                const std::vector<std::pair<std::string, Tensor>>& optimizer_state) {
  const fs::path d(dir);
  const std::string manifest_path = (d / "manifest.json").string();
  json m;
  {
    std::ifstream in(manifest_path);
    if (!in) ZT_THROW_INPUT("cannot read '", manifest_path, "'");
    try {
      in >> m;
    } catch (const json::exception& e) {
      ZT_THROW_INPUT("'", manifest_path, "' is not valid JSON: ", e.what());
    }
  }
  if (m.value("format", "") != kFormat)
    ZT_THROW_INPUT("'", manifest_path, "' is not a zerotrain checkpoint manifest (format '", m.value("format", ""), "')");
  const int W = m.value("world_size", 1);

  // The unit layout must be the same model (padding may differ with the world size).
  const json& units = m.at("units");
  if (units.size() != registry.size())
    ZT_THROW_INPUT(manifest_path, ": checkpoint has ", units.size(), " units, this model has ", registry.size(),
                   " (a checkpoint of another model?)");
  for (size_t i = 0; i < registry.size(); ++i) {
    const model::Unit& u = registry.unit(i);
    const json& ju = units[i];
    if (ju.at("name") != u.name() || ju.at("numel").get<int64_t>() != u.numel() ||
        ju.at("params").size() != u.params().size())
      ZT_THROW_INPUT(manifest_path, ": unit ", i, " is '", ju.at("name").get<std::string>(), "' with ",
                     ju.at("numel").get<int64_t>(), " elements; this model has '", u.name(), "' with ", u.numel(),
                     " (a checkpoint of another model?)");
    for (size_t k = 0; k < u.params().size(); ++k) {
      const auto& p = u.params()[k];
      const json& jp = ju.at("params")[k];
      if (jp.at("name") != p.name() || jp.at("offset").get<int64_t>() != p.offset ||
          jp.at("shape").get<Shape>() != p.spec.shape)
        ZT_THROW_INPUT(manifest_path, ": parameter ", jp.at("name").get<std::string>(), " ",
                       shape_str(jp.at("shape").get<Shape>()), " does not match this model's ", p.name(), " ",
                       shape_str(p.spec.shape));
    }
  }

  // Targets by name: where each saved flat buffer goes.
  std::map<std::string, Tensor> targets;
  for (auto& u : registry.units()) targets[u->name() + ".params"] = u->flat_params();
  for (const auto& kv : optimizer_state) targets[kv.first] = kv.second;
  std::map<std::string, bool> filled;
  for (int r = 0; r < W; ++r) {
    const std::string path = (d / shard_name(r)).string();
    if (!fs::exists(path))
      ZT_THROW_INPUT("checkpoint '", dir, "' is missing rank ", r, "'s shard ", shard_name(r), " (it was saved by ", W,
                     " ranks)");
    io::SafetensorsReader reader(path);
    for (const auto& [name, target] : targets) {
      if (!reader.contains(name)) continue;
      const Tensor src = reader.tensor(name);
      const int64_t part = src.numel();
      // Copy the overlap of [r*part, (r+1)*part) with the target's length (padding differs by world size).
      const int64_t begin = r * part, n = std::max<int64_t>(0, std::min(part, target.numel() - begin));
      if (n > 0) flat_slice(target, begin, n).copy_from(src.narrow(0, 0, n));
      filled[name] = true;
    }
  }
  for (const auto& kv : targets)
    if (!filled[kv.first])
      ZT_THROW_INPUT("checkpoint '", dir, "' has no tensor '", kv.first,
                     "' (saved with another optimizer or model?)");

  CheckpointState s;
  s.step = m.value("step", int64_t{0});
  s.micro_steps = m.value("micro_steps", int64_t{0});
  s.data_epoch = m.at("data").value("epoch", uint64_t{0});
  s.data_position = m.at("data").value("position", uint64_t{0});
  s.seed = m.value("seed", uint64_t{0});
  s.loss_scaler = m.value("loss_scaler", json::object());
  s.extra = m.value("extra", json::object());
  ZT_INFO("loaded checkpoint ", dir, " (step ", s.step, ", saved by ", W, " rank", W == 1 ? "" : "s", ")");
  return s;
}

}  // namespace zt::train
