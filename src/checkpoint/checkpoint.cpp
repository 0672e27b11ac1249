#include "checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/fail_point.h"
#include "core/log.h"
#include "io/bounded_file.h"
#include "io/safetensors.h"
#include "io/staging_dir.h"
#include "ops/copy.h"
#include "checkpoint/checkpoint_validate.h"

namespace zt::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string step_dir_name(int64_t step) { return "global_step" + std::to_string(step); }

std::string shard_name(int rank) { return "shard_rank" + std::to_string(rank) + ".safetensors"; }

json unit_layout(const model::ParameterRegistry& registry) {
  json units = json::array();
  for (const auto& u : registry.units()) {
    json params = json::array();
    for (const auto& p : u->params())
      params.push_back({{"name", p.name()}, {"offset", p.offset}, {"shape", p.spec.shape}});
    units.push_back(
        {{"name", u->name()}, {"numel", u->numel()}, {"padded_numel", u->padded_numel()}, {"params", params}});
  }
  return units;
}

// A marked temporary of ours at `path` (or nothing, or an empty folder: a kill between its
// mkdir and its marker) is removed: true. False when something else stands there (a
// user's folder or file of that name), which is left alone.
bool remove_if_ours(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return true;
  if (!io::marked_dir_owner(path.string())) return io::remove_empty_dir(path.string());
  fs::remove_all(path, ec);
  return !ec;
}

// The marked folder a save of `name` stages in.
fs::path staging_folder(const fs::path& root, const std::string& name) { return root / ("." + name + ".tmp"); }

// Elements [begin, begin + n) of a flat 1-D tensor.
Tensor flat_slice(const Tensor& flat, int64_t begin, int64_t n) { return flat.narrow(0, begin, n); }

void prune(const fs::path& root, int64_t keep_last, const std::string& newest, const std::string& keep) {
  if (keep_last <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    // A checkpoint of ours: a real directory (not a link to one) holding our manifest;
    // anything else of that name is the user's and is neither counted nor deleted.
    std::error_code sec;
    if (!entry.is_directory() || entry.is_symlink(sec) || name.rfind("global_step", 0) != 0 ||
        !fs::is_regular_file(fs::symlink_status(entry.path() / "manifest.json", sec)))
      continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 11, &end, 10);
    if (end && *end == '\0') found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  const int64_t excess = static_cast<int64_t>(found.size()) - keep_last;
  for (int64_t i = 0; i < excess; ++i) {
    const fs::path& dir = found[static_cast<size_t>(i)].second;
    if (dir.filename() == newest || (!keep.empty() && dir.filename() == keep)) continue;
    // Moved out of sight first, into a marked folder: a kill during the (long) delete must
    // not leave a half-deleted global_stepN that looks like a checkpoint, and what it
    // leaves is provably ours for the next run's clean-up.
    const fs::path doomed = root / ("." + dir.filename().string() + ".del");
    std::error_code ec;
    if (!remove_if_ours(doomed)) {
      ZT_WARN("not pruning ", dir.string(), ": ", doomed.string(), " exists and is not zerotrain's");
      continue;
    }
    try {
      io::create_marked_dir(doomed.string());
    } catch (const std::exception& e) {
      ZT_WARN("could not remove old checkpoint ", dir.string(), ": ", e.what());
      continue;
    }
    fs::rename(dir, io::aside_content(doomed.string()), ec);
    if (!ec) fs::remove_all(doomed, ec);
    if (ec) ZT_WARN("could not remove old checkpoint ", dir.string(), ": ", ec.message());
  }
}

}  // namespace

std::string checkpoint_staging_dir(const std::string& root, int64_t step) {
  return io::aside_content(staging_folder(fs::path(root), step_dir_name(step)).string());
}

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
bool all_ranks_ok(comm::Communicator* comm, bool ok) { return comm ? !comm::any_rank(*comm, !ok) : ok; }

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
  // One temporary directory shared by all ranks, in a marked folder: rank 0 creates it,
  // everyone writes into it.
  const fs::path folder = staging_folder(root, name);
  const fs::path tmp_dir = checkpoint_staging_dir(root_str, state.step);
  std::error_code ec;
  std::string error;
  if (r == 0) {
    fs::create_directories(root, ec);
    if (ec) {
      error = "cannot create '" + root.string() + "': " + ec.message();
    } else if (!remove_if_ours(folder)) {
      error = "'" + folder.string() + "' exists and is not a temporary of zerotrain's: move it away";
    } else {
      try {
        io::create_marked_dir(folder.string());
        if (!fs::create_directory(tmp_dir, ec) || ec)
          error = "cannot create '" + tmp_dir.string() + "': " + (ec ? ec.message() : std::string("it exists"));
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
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
      if (s.io) {
        const DType dtype = s.data.dtype();
        sources.push_back({s.name, dtype, {part}, [io = s.io, at = want - s.begin, part, dtype, n = s.name](void* dst) {
                             io->read(at, Tensor(dst, {part}, dtype));
                             check_saved_finite(n, Tensor(dst, {part}, dtype));
                           }});
        continue;
      }
      const Tensor slice = flat_slice(s.data, want - s.begin, part);
      sources.push_back({s.name, slice.dtype(), slice.shape(), [slice, n = s.name](void* dst) {
                           ops::copy(Tensor(dst, slice.shape(), slice.dtype()), slice);
                           check_saved_finite(n, Tensor(dst, slice.shape(), slice.dtype()));
                         }});
    }
    io::write_safetensors((tmp_dir / shard_name(r)).string(), sources,
                          {{"format", kCheckpointFormat}, {"rank", std::to_string(r)}});
    fail_point("checkpoint.shard_written", name.c_str());
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_ranks_ok(options.comm, error.empty())) {
    if (r == 0) fs::remove_all(folder, ec);
    ZT_THROW_IO("saving checkpoint ", final_dir.string(), " failed",
                error.empty() ? std::string(" on another rank") : ": " + error);
  }

  if (r == 0) {
    try {
      json manifest = {
          {"format", kCheckpointFormat},
          {"version", kCheckpointVersion},
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
      for (const FlatSlice& s : slices)
        if (s.name.size() < 7 || s.name.compare(s.name.size() - 7, 7, ".params") != 0)
          manifest["optimizer_state"].push_back(s.name);
      const std::string text = manifest.dump(2) + "\n";
      io::write_file_atomic((tmp_dir / "manifest.json").string(),
                            [&](std::FILE* f) { std::fwrite(text.data(), 1, text.size(), f); });
      fail_point("checkpoint.manifest_written", name.c_str());
      // Re-saving a step that exists (a run resumed from an older checkpoint) swaps the
      // new directory in atomically: `latest` may name this very step.
      const fs::path aside = root / ("." + name + ".old");
      if (!remove_if_ours(aside))
        ZT_THROW_IO("'", aside.string(), "' exists and is not a temporary of zerotrain's: move it away");
      io::replace_directory(tmp_dir.string(), final_dir.string(), aside.string());
      fail_point("checkpoint.renamed", name.c_str());
      fs::remove_all(folder, ec);  // its marker
      io::write_file_atomic((root / "latest").string(), [&](std::FILE* f) { std::fprintf(f, "%s\n", name.c_str()); });
      fail_point("checkpoint.latest_written", name.c_str());
      prune(root, options.keep_last, name, options.keep);
    } catch (const std::exception& e) {
      error = e.what();
      fs::remove_all(folder, ec);
    }
  }
  if (!all_ranks_ok(options.comm, error.empty()))
    ZT_THROW_IO("saving checkpoint ", final_dir.string(), " failed",
                error.empty() ? std::string(" on rank 0") : ": " + error);
  return final_dir.string();
}

namespace {

// global_step<N> -> N; -1 for other names.
int64_t step_of(const std::string& name) {
  if (name.rfind("global_step", 0) != 0 || name.size() == 11) return -1;
  char* end = nullptr;
  const long long step = std::strtoll(name.c_str() + 11, &end, 10);
  return end && *end == '\0' && step >= 0 ? step : -1;
}

// On a filesystem without an atomic exchange, re-saving step N moves the old global_stepN
// aside to .global_stepN.old before renaming the new one in; a crash between the two
// leaves `latest` naming a missing directory whose complete old version is aside: put it
// back (the save never finished, so the old checkpoint is the newest complete one).
void recover_aside(const fs::path& root, const std::string& name) {
  std::error_code ec;
  const fs::path dir = root / name, aside_folder = root / ("." + name + ".old");
  const fs::path aside = io::aside_content(aside_folder.string());
  if (fs::exists(fs::symlink_status(dir, ec)) || !io::marked_dir_owner(aside_folder.string()) ||
      !fs::is_directory(aside, ec) || !checkpoint_complete(aside.string()))
    return;
  fs::rename(aside, dir, ec);
  if (ec) {
    ZT_WARN("could not move ", aside.string(), " back to ", dir.string(), ": ", ec.message());
  } else {
    ZT_WARN("put ", aside.string(), " back as ", dir.string(), " (a re-save of that step was interrupted)");
  }
}

// What is wrong with `latest` (empty when it names a complete checkpoint).
std::string latest_problem(const fs::path& root, std::string* name) {
  const fs::path latest = root / "latest";
  // A regular file of a few bytes ("global_stepN\n"): a FIFO there must not block the
  // open, a link to /dev/zero not read forever (io/bounded_file.h); either is a problem
  // like a damaged `latest`.
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(latest, ec))) return "'" + latest.string() + "' does not exist or is empty";
  std::string text;
  try {
    text = io::read_bounded_file(latest.string(), "checkpoint folder's latest file", 4096);
  } catch (const Error& e) {
    return e.what();
  }
  std::istringstream in(text);
  if (!(in >> *name)) return "'" + latest.string() + "' does not exist or is empty";
  std::string why;
  if (step_of(*name) < 0)
    return "'" + latest.string() + "' names '" + *name + "', which is not a checkpoint directory name";
  recover_aside(root, *name);
  if (!checkpoint_complete((root / *name).string(), &why))
    return "'" + latest.string() + "' names '" + *name + "', which is not a complete checkpoint: " + why;
  return "";
}

}  // namespace

std::string newest_complete_checkpoint(const std::string& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  for (auto it = found.rbegin(); it != found.rend(); ++it)
    if (checkpoint_complete(it->second.string())) return it->second.string();
  return "";
}

std::string resolve_checkpoint(const std::string& root_or_dir, const std::string& which) {
  const fs::path p(root_or_dir);
  std::error_code ec;
  if (fs::exists(p / "manifest.json", ec)) return p.string();
  if (which == "latest" || which.empty()) {
    std::string name;
    const std::string problem = latest_problem(p, &name);
    if (problem.empty()) return (p / name).string();
    const std::string newest = newest_complete_checkpoint(p.string());
    if (!fs::exists(p / "latest", ec) && newest.empty())
      ZT_THROW_INPUT("no checkpoint to resume from: '", (p / "latest").string(),
                     "' does not exist (train with checkpoints first, or drop --resume)");
    ZT_THROW_INPUT(problem, newest.empty() ? std::string("; no complete checkpoint is left in '") + p.string() + "'"
                                           : "; the newest complete checkpoint is '" + newest +
                                                 "': give it to --resume, or use --resume auto");
  }
  if (fs::exists(p / which / "manifest.json", ec)) return (p / which).string();
  ZT_THROW_INPUT("no checkpoint '", which, "' in '", p.string(), "'");
}

std::string resolve_checkpoint_auto(const std::string& root) {
  std::string name;
  const std::string problem = latest_problem(root, &name);
  if (problem.empty()) return (fs::path(root) / name).string();
  const std::string newest = newest_complete_checkpoint(root);
  std::error_code ec;
  if (newest.empty()) {
    if (fs::exists(fs::path(root) / "latest", ec))
      ZT_WARN("--resume auto: ", problem, ", and no complete checkpoint is in ", root, ": starting from step 0");
    return "";
  }
  ZT_WARN("--resume auto: ", problem, "; resuming from the newest complete checkpoint, ", newest);
  return newest;
}

std::vector<std::string> remove_stale_checkpoint_temps(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  std::string name;
  latest_problem(root, &name);  // first puts back an aside checkpoint that `latest` names
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string n = entry.path().filename().string();
    // .global_stepN.tmp / .old / .del: a save's staging, aside and pruned folders (the
    // output directory has one run at a time, so any left at start are a dead run's),
    // removed only when they carry zerotrain's marker.
    const bool temp_name =
        n.rfind(".global_step", 0) == 0 &&
        (n.size() > 4 && (n.compare(n.size() - 4, 4, ".tmp") == 0 || n.compare(n.size() - 4, 4, ".old") == 0 ||
                          n.compare(n.size() - 4, 4, ".del") == 0));
    if (!temp_name) continue;
    if (!io::marked_dir_owner(entry.path().string())) {
      if (io::remove_empty_dir(entry.path().string())) {  // killed between its mkdir and its marker
        removed.push_back(entry.path().string());
        continue;
      }
      ZT_WARN(entry.path().string(),
              " looks like a temporary of an interrupted save but lacks zerotrain's marker: "
              "left alone");
      continue;
    }
    std::error_code rec;
    fs::remove_all(entry.path(), rec);
    if (rec) {
      ZT_WARN("could not remove the stale temporary ", entry.path().string(),
              " of an interrupted save: ", rec.message());
    } else {
      removed.push_back(entry.path().string());
    }
  }
  // latest.tmp-<pid>-<n>: write_file_atomic's marked temporary, of a process that is gone.
  for (std::string& p : io::remove_stale_atomic_temps(root)) removed.push_back(std::move(p));
  return removed;
}

CheckpointState load_checkpoint(const std::string& dir, const model::ParameterRegistry& registry,
                                const std::vector<FlatSlice>& targets) {
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  check_manifest_layout(m, registry, " (a checkpoint of another model?)");
  check_shards_present(m);
  const int W = m.world_size;

  // Each target takes the overlap of its range with every saved rank's slice, within
  // the unit's real elements (padding differs with the world size and stays zero).
  std::vector<std::unique_ptr<io::SafetensorsReader>> readers(static_cast<size_t>(W));
  auto reader = [&](int r) -> io::SafetensorsReader& {
    auto& slot = readers[static_cast<size_t>(r)];
    if (!slot) slot = std::make_unique<io::SafetensorsReader>(m.shard_path(r));
    return *slot;
  };
  const std::vector<std::string>& saved_state = m.optimizer_state;
  std::vector<std::string> absent;
  for (const FlatSlice& t : targets) {
    if (t.optional && std::find(saved_state.begin(), saved_state.end(), t.name) == saved_state.end()) {
      absent.push_back(t.name);
      continue;
    }
    const model::Unit& u = unit_of(registry, t.name);
    const int64_t part = m.find_unit(u.name())->part;  // present: the layouts matched
    const int64_t lo = t.begin, hi = std::min(t.begin + t.data.numel(), u.numel());
    for (int r = 0; r < W && lo < hi; ++r) {
      const int64_t s_lo = std::max(lo, r * part), s_hi = std::min(hi, (r + 1) * part);
      if (s_hi <= s_lo) continue;
      // Copying converts between float types only: f32 state into a bf16 (master_weights:
      // false) run rounds to nearest even, bf16 state into an f32 one widens exactly.
      const Tensor src = checked_shard_tensor(m, reader(r), t.name, r);
      const Tensor piece = flat_slice(src, s_lo - r * part, s_hi - s_lo);
      check_loaded_finite(m.shard_path(r), t.name, piece);
      if (t.io) {
        // Swapped state: the piece in the target's dtype, written in place.
        OwnedTensor converted({s_hi - s_lo}, t.data.dtype());
        ops::copy(converted, piece);
        t.io->write(s_lo - t.begin, converted);
        continue;
      }
      ops::copy(flat_slice(t.data, s_lo - t.begin, s_hi - s_lo), piece);
    }
  }

  CheckpointState s;
  s.step = m.step;
  s.micro_steps = m.micro_steps;
  s.data_epoch = m.data_epoch;
  s.data_position = m.data_position;
  s.seed = m.seed;
  s.loss_scaler = m.loss_scaler.is_null() ? json::object() : m.loss_scaler;
  s.extra = m.extra;
  s.saved_optimizer_state = saved_state;
  s.absent = std::move(absent);
  ZT_INFO("loaded checkpoint ", dir, " (step ", s.step, ", saved by ", W, " rank", W == 1 ? "" : "s", ")");
  return s;
}

}  // namespace zt::checkpoint
