#include "cli/launch_selection.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace zt::cli {

namespace {

// One entry of a filter: a host, and the GPUs named after its colon (none: all of it).
struct FilterEntry {
  std::string host;
  std::vector<int> gpus;
};

std::vector<FilterEntry> parse_filter(const std::string& text, const std::string& flag) {
  std::vector<FilterEntry> entries;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, '@');) {
    if (part.empty())
      ZT_THROW_INPUT(flag, " '", text, "': an empty host between '@'s; write hosts as 'worker-1:0,1@worker-2'");
    const size_t colon = part.find(':');
    FilterEntry e{part.substr(0, colon), {}};
    if (e.host.empty()) ZT_THROW_INPUT(flag, " '", text, "': '", part, "' names no host; write 'host:0,1'");
    if (colon != std::string::npos) e.gpus = parse_gpu_list(part.substr(colon + 1), flag + " " + e.host);
    for (const FilterEntry& seen : entries)
      if (seen.host == e.host)
        ZT_THROW_INPUT(flag, " '", text, "': host ", e.host, " is named twice; name it once with all its GPUs");
    entries.push_back(std::move(e));
  }
  if (entries.empty()) ZT_THROW_INPUT(flag, " is empty; write hosts and GPUs as 'worker-1:0,1@worker-2'");
  return entries;
}

std::string host_names(const GpuPool& pool) {
  std::string names;
  for (const NodeGpus& n : pool.nodes) names += (names.empty() ? "" : ", ") + n.host;
  return names;
}

const NodeGpus& pool_node(const GpuPool& pool, const std::string& host, const std::string& flag) {
  for (const NodeGpus& n : pool.nodes)
    if (n.host == host) return n;
  ZT_THROW_INPUT(flag, ": host ", host, " is not in ", pool.name, " (", host_names(pool), "); name one of those",
                 pool.name.rfind("hostfile", 0) == 0 ? ", or add it to the hostfile" : "");
}

bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

void check_gpus_in_pool(const NodeGpus& node, const std::vector<int>& gpus, const GpuPool& pool,
                        const std::string& flag) {
  if (pool.open) return;
  for (int g : gpus)
    if (!has(node.gpus, g))
      ZT_THROW_INPUT(flag, ": host ", node.host, " has no GPU ", g, " in ", pool.name, " (it has ",
                     gpu_list_text(node.gpus), "); name GPUs from that list");
}

std::vector<NodeGpus> include_only(const GpuPool& pool, const std::string& include) {
  const std::vector<FilterEntry> entries = parse_filter(include, "--include");
  std::vector<NodeGpus> out;
  for (const NodeGpus& node : pool.nodes) {  // the pool's order: ranks are placed host by host
    const auto e =
        std::find_if(entries.begin(), entries.end(), [&](const FilterEntry& f) { return f.host == node.host; });
    if (e == entries.end()) continue;
    if (e->gpus.empty() && pool.open)
      ZT_THROW_INPUT("--include ", node.host, ": name its GPUs (", node.host,
                     ":0,1): CUDA sees no GPU here to take them all from");
    check_gpus_in_pool(node, e->gpus, pool, "--include");
    out.push_back({node.host, e->gpus.empty() ? node.gpus : e->gpus});
  }
  for (const FilterEntry& e : entries) pool_node(pool, e.host, "--include");  // names every stranger
  return out;
}

std::vector<NodeGpus> exclude_these(const GpuPool& pool, const std::string& exclude) {
  if (pool.open)
    ZT_THROW_INPUT("--exclude: CUDA sees no GPU on ", pool.name,
                   " to leave some out of; name the ranks' GPUs with --include localhost:0,1 or count them with "
                   "--num_gpus N");
  const std::vector<FilterEntry> entries = parse_filter(exclude, "--exclude");
  for (const FilterEntry& e : entries)
    check_gpus_in_pool(pool_node(pool, e.host, "--exclude"), e.gpus, pool, "--exclude");
  std::vector<NodeGpus> out;
  for (const NodeGpus& node : pool.nodes) {
    const auto e =
        std::find_if(entries.begin(), entries.end(), [&](const FilterEntry& f) { return f.host == node.host; });
    NodeGpus kept{node.host, {}};
    if (e != entries.end() && e->gpus.empty()) continue;  // the whole host
    for (int g : node.gpus)
      if (e == entries.end() || !has(e->gpus, g)) kept.gpus.push_back(g);
    if (!kept.gpus.empty()) out.push_back(std::move(kept));
  }
  return out;
}

}  // namespace

std::vector<int> parse_gpu_list(const std::string& text, const std::string& what) {
  std::vector<int> gpus;
  std::istringstream in(text);
  for (std::string word; std::getline(in, word, ',');) {
    char* end = nullptr;
    const long g = std::strtol(word.c_str(), &end, 10);
    if (word.empty() || *end != '\0' || g < 0 || g > 1 << 16)
      ZT_THROW_INPUT(what, ": '", text, "' is not a list of GPU numbers; write them as 0,1,3");
    if (has(gpus, static_cast<int>(g))) ZT_THROW_INPUT(what, ": '", text, "' names GPU ", g, " twice");
    gpus.push_back(static_cast<int>(g));
  }
  if (gpus.empty()) ZT_THROW_INPUT(what, ": no GPU numbers; write them as 0,1,3");
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

std::string gpu_list_text(const std::vector<int>& gpus) {
  std::string s;
  for (int g : gpus) s += (s.empty() ? "" : ",") + std::to_string(g);
  return s;
}

std::vector<NodeGpus> select_gpus(const GpuPool& pool, const GpuSelection& s) {
  if (!s.include.empty() && !s.exclude.empty())
    ZT_THROW_INPUT("--include and --exclude together: give one of them (DeepSpeed refuses both too)");
  if ((s.num_nodes > 0 || s.num_gpus > 0) && (!s.include.empty() || !s.exclude.empty()))
    ZT_THROW_INPUT(s.num_nodes > 0 ? "--num_nodes" : "--num_gpus", " with ",
                   s.include.empty() ? "--exclude" : "--include",
                   ": give one of them (DeepSpeed refuses both too); --include host:0,1 names the GPUs itself");
  std::vector<NodeGpus> nodes = !s.include.empty()   ? include_only(pool, s.include)
                                : !s.exclude.empty() ? exclude_these(pool, s.exclude)
                                                     : pool.nodes;
  if (s.num_nodes > 0) {
    if (s.num_nodes > static_cast<int>(nodes.size()))
      ZT_THROW_INPUT("--num_nodes ", s.num_nodes, ": ", pool.name, " has ", nodes.size(), " node(s) (",
                     host_names(pool), "); ask for at most ", nodes.size(),
                     pool.name.rfind("hostfile", 0) == 0 ? " or list more hosts" : ", or give a --hostfile");
    nodes.resize(static_cast<size_t>(s.num_nodes));
  }
  if (s.num_gpus > 0) {
    for (NodeGpus& node : nodes) {
      if (!pool.open && s.num_gpus > static_cast<int>(node.gpus.size()))
        ZT_THROW_INPUT("--num_gpus ", s.num_gpus, ": host ", node.host, " has ", node.gpus.size(), " GPU(s) in ",
                       pool.name, "; ask for at most ", node.gpus.size());
      node.gpus.clear();
      for (int g = 0; g < s.num_gpus; ++g) node.gpus.push_back(g);
    }
  }
  if (nodes.empty())
    ZT_THROW_INPUT(!s.exclude.empty() ? "--exclude '" + s.exclude + "'" : "--include '" + s.include + "'",
                   " leaves no GPU of ", pool.name, " to run on; keep at least one");
  return nodes;
}

std::string node_gpus_text(const std::vector<NodeGpus>& nodes) {
  std::string s;
  for (const NodeGpus& n : nodes) s += (s.empty() ? "" : ";") + gpu_list_text(n.gpus);
  return s;
}

std::vector<int> gpus_of_rank(const std::string& node_gpus, int rank) {
  std::istringstream in(node_gpus);
  int first = 0;
  for (std::string list; std::getline(in, list, ';');) {
    const std::vector<int> gpus = parse_gpu_list(list, "launch --node-gpus");
    if (rank < first + static_cast<int>(gpus.size())) return gpus;
    first += static_cast<int>(gpus.size());
  }
  ZT_THROW_INPUT("launch --node-gpus '", node_gpus, "' has GPUs for ", first, " ranks, not for rank ", rank);
}

}  // namespace zt::cli
