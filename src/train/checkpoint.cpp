#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "ops/copy.h"

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

std::vector<FlatSlice> whole_param_slices(const model::ParameterRegistry& registry) {
  std::vector<FlatSlice> out;
  for (const auto& u : registry.units()) out.push_back({u->name() + ".params", u->flat_params(), 0});
  return out;
}

namespace {

// The unit a flat buffer name belongs to: "block.3.exp_avg" -> unit "block.3".
const model::Unit& unit_of(const model::ParameterRegistry& registry, const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string unit = dot == std::string::npos ? name : name.substr(0, dot);
  for (const auto& u : registry.units())
    if (u->name() == unit) return *u;
  ZT_THROW_INPUT("checkpoint tensor '", name, "' names no unit of the model");
}

// Every rank learns whether all ranks succeeded (a failed rank must not leave the others
// renaming an incomplete checkpoint, nor waiting forever).
bool all_ranks_ok(dist::Communicator* comm, bool ok) { return comm ? !dist::any_rank(*comm, !ok) : ok; }

}  // namespace

std::string save_checkpoint(const std::string& root_str, const model::ParameterRegistry& registry,
                            const std::vector<FlatSlice>& slices, const CheckpointState& state,
                            const CheckpointWriteOptions& options) {
  const fs::path root(root_str);
  const int W = options.world_size, r = options.rank;
  ZT_CHECK(!options.comm || (options.comm->size() == W && options.comm->rank() == r),
           "checkpoint options disagree with the communicator");
  const std::string name = step_dir_name(state.step);
  const fs::path final_dir = root / name;
  // One temporary directory shared by all ranks: rank 0 creates it, everyone writes into it.
  const fs::path tmp_dir = root / ("." + name + ".tmp");
  std::error_code ec;
  std::string error;
  if (r == 0) {
    fs::create_directories(root, ec);
    if (!ec) fs::remove_all(tmp_dir, ec);
    if (!ec) fs::create_directories(tmp_dir, ec);
    if (ec) error = "cannot create '" + tmp_dir.string() + "': " + ec.message();
  }
  if (!all_ranks_ok(options.comm, error.empty()))
    ZT_THROW_IO(error.empty() ? "rank 0 could not create the checkpoint directory under " + root.string() : error);

  try {
    std::vector<io::TensorSource> sources;
    for (const FlatSlice& s : slices) {
      const model::Unit& u = unit_of(registry, s.name);
      ZT_CHECK(u.padded_numel() % W == 0, "unit ", u.name(), " is not divisible by the world size ", W);
      const int64_t part = u.padded_numel() / W, want = r * part;
      ZT_CHECK(s.data.dim() == 1 && s.begin <= want && want + part <= s.begin + s.data.numel(), "checkpoint tensor ",
               s.name, " [", s.begin, ", ", s.begin + s.data.numel(), ") does not hold rank ", r, "'s slice [", want,
               ", ", want + part, ")");
      const Tensor slice = flat_slice(s.data, want - s.begin, part);
      sources.push_back({s.name, slice.dtype(), slice.shape(),
                         [slice](void* dst) { ops::copy(Tensor(dst, slice.shape(), slice.dtype()), slice); }});
    }
    io::write_safetensors((tmp_dir / shard_name(r)).string(), sources,
                          {{"format", kFormat}, {"rank", std::to_string(r)}});
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_ranks_ok(options.comm, error.empty())) {
    if (r == 0) fs::remove_all(tmp_dir, ec);
    ZT_THROW_IO("saving checkpoint ", final_dir.string(), " failed",
                error.empty() ? std::string(" on another rank") : ": " + error);
  }

  if (r == 0) {
    try {
      json manifest = {{"format", kFormat},
                       {"version", kVersion},
                       {"step", state.step},
                       {"micro_steps", state.micro_steps},
                       {"world_size", W},
                       {"zero_stage", options.zero_stage},
                       {"param_dtype",
                        registry.units().empty() ? "f32" : dtype_name(registry.units()[0]->param_dtype())},
                       {"units", unit_layout(registry)},
                       {"optimizer_state", json::array()},
                       {"data", {{"epoch", state.data_epoch}, {"position", state.data_position}}},
                       {"seed", state.seed},
                       {"loss_scaler", state.loss_scaler},
                       {"extra", state.extra}};
      for (const FlatSlice& s : slices)
        if (s.name.size() < 7 || s.name.compare(s.name.size() - 7, 7, ".params") != 0)
          manifest["optimizer_state"].push_back(s.name);
      const std::string text = manifest.dump(2) + "\n";
      io::write_file_atomic((tmp_dir / "manifest.json").string(),
                            [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
      if (fs::exists(final_dir)) fs::remove_all(final_dir);
      fs::rename(tmp_dir, final_dir);
      io::write_file_atomic((root / "latest").string(),
                            [&](std::FILE* f) { std::fprintf(f, "%s\n", name.c_str()); });
      prune(root, options.keep_last, name);
    } catch (const std::exception& e) {
      error = e.what();
      fs::remove_all(tmp_dir, ec);
    }
  }
  if (!all_ranks_ok(options.comm, error.empty()))
    ZT_THROW_IO("saving checkpoint ", final_dir.string(), " failed",
                error.empty() ? std::string(" on rank 0") : ": " + error);
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

CheckpointState load_checkpoint(const std::string& dir, const model::ParameterRegistry& registry,
                                const std::vector<FlatSlice>& targets) {
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

  // Each target takes the overlap of its range with every saved rank's slice, within
  // the unit's real elements (padding differs with the world size and stays zero).
  std::map<std::string, int64_t> saved_padded;
  for (const json& ju : units) saved_padded[ju.at("name").get<std::string>()] = ju.at("padded_numel").get<int64_t>();
  std::vector<std::unique_ptr<io::SafetensorsReader>> readers(static_cast<size_t>(W));
  auto reader = [&](int r) -> io::SafetensorsReader& {
    auto& slot = readers[static_cast<size_t>(r)];
    if (!slot) {
      const std::string path = (d / shard_name(r)).string();
      if (!fs::exists(path))
        ZT_THROW_INPUT("checkpoint '", dir, "' is missing rank ", r, "'s shard ", shard_name(r), " (it was saved by ",
                       W, " ranks): copy the complete checkpoint directory");
      slot = std::make_unique<io::SafetensorsReader>(path);
    }
    return *slot;
  };
  std::vector<std::string> saved_state;
  if (m.contains("optimizer_state") && m.at("optimizer_state").is_array())
    for (const json& n : m.at("optimizer_state"))
      if (n.is_string()) saved_state.push_back(n.get<std::string>());
  std::vector<std::string> absent;
  for (const FlatSlice& t : targets) {
    if (t.optional && std::find(saved_state.begin(), saved_state.end(), t.name) == saved_state.end()) {
      absent.push_back(t.name);
      continue;
    }
    const model::Unit& u = unit_of(registry, t.name);
    const int64_t part = saved_padded.at(u.name()) / W;
    const int64_t lo = t.begin, hi = std::min(t.begin + t.data.numel(), u.numel());
    for (int r = 0; r < W && lo < hi; ++r) {
      const int64_t s_lo = std::max(lo, r * part), s_hi = std::min(hi, (r + 1) * part);
      if (s_hi <= s_lo) continue;
      io::SafetensorsReader& rd = reader(r);
      if (!rd.contains(t.name))
        ZT_THROW_INPUT("checkpoint '", dir, "' has no tensor '", t.name, "' in ", shard_name(r),
                       " (saved with another optimizer or precision?)");
      // Copying converts the dtype: f32 state into a bf16 (master_weights: false) run rounds
      // to nearest even, bf16 state into an f32 one widens exactly.
      const Tensor src = rd.tensor(t.name);
      if (src.numel() != part)
        ZT_THROW_INPUT("checkpoint '", dir, "': tensor '", t.name, "' in ", shard_name(r), " has ", src.numel(),
                       " elements, the manifest implies ", part);
      ops::copy(flat_slice(t.data, s_lo - t.begin, s_hi - s_lo), flat_slice(src, s_lo - r * part, s_hi - s_lo));
    }
  }

  CheckpointState s;
  s.step = m.value("step", int64_t{0});
  s.micro_steps = m.value("micro_steps", int64_t{0});
  s.data_epoch = m.at("data").value("epoch", uint64_t{0});
  s.data_position = m.at("data").value("position", uint64_t{0});
  s.seed = m.value("seed", uint64_t{0});
  s.loss_scaler = m.value("loss_scaler", json::object());
  s.extra = m.value("extra", json::object());
  s.saved_optimizer_state = std::move(saved_state);
  s.absent = std::move(absent);
  ZT_INFO("loaded checkpoint ", dir, " (step ", s.step, ", saved by ", W, " rank", W == 1 ? "" : "s", ")");
  return s;
}

}  // namespace zt::train
