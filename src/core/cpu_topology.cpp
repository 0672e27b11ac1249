#include "core/cpu_topology.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace zt {
namespace {

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *out = std::stoi(s);
  return true;
}

}  // namespace

std::optional<std::vector<int>> parse_cpu_list(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  std::vector<int> cpus;
  if (t.empty()) return cpus;
  std::stringstream ss(t);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const size_t dash = part.find('-');
    int a = 0, b = 0;
    if (dash == std::string::npos) {
      if (!parse_int(part, &a)) return std::nullopt;
      b = a;
    } else if (!parse_int(part.substr(0, dash), &a) || !parse_int(part.substr(dash + 1), &b) || b < a) {
      return std::nullopt;
    }
    for (int c = a; c <= b; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

bool process_is_restricted() {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 && allowed_cpus().size() < static_cast<size_t>(online);
}

CpuTopology read_cpu_topology() {
  // Only the CPUs this process may use: a container or a launcher may have taken some away.
  const std::vector<int> allowed = allowed_cpus();
  CpuTopology t;
  std::map<int, std::vector<int>> by_node;
  std::error_code ec;
  const std::filesystem::path root("/sys/devices/system/node");
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int id = 0;
    if (name.rfind("node", 0) != 0 || !parse_int(name.substr(4), &id)) continue;
    std::ifstream in(entry.path() / "cpulist");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto cpus = parse_cpu_list(text);
    if (!cpus) continue;
    std::vector<int> mine;
    for (int c : *cpus)
      if (std::binary_search(allowed.begin(), allowed.end(), c)) mine.push_back(c);
    if (!mine.empty()) by_node[id] = std::move(mine);
  }
  for (auto& [id, cpus] : by_node) t.nodes.push_back(std::move(cpus));
  if (t.nodes.empty() && !allowed.empty()) t.nodes.push_back(allowed);
  if (t.nodes.empty()) t.nodes.push_back({0});
  return t;
}

RankCpus rank_cpus(const CpuTopology& topology, int local_rank, int local_world_size) {
  RankCpus r;
  const int nodes = static_cast<int>(topology.nodes.size());
  const int L = std::max(1, local_world_size);
  const int rank = std::clamp(local_rank, 0, L - 1);
  if (nodes == 0) {
    r.cpus = {0};
    return r;
  }
  // Blocks of ranks per node: ranks [first_rank(n), first_rank(n + 1)) live on node n.
  r.node = L >= nodes ? static_cast<int>(static_cast<int64_t>(rank) * nodes / L) : rank;
  const auto first_rank = [&](int n) { return static_cast<int>((static_cast<int64_t>(n) * L + nodes - 1) / nodes); };
  const int begin_rank = L >= nodes ? first_rank(r.node) : rank;
  const int end_rank = L >= nodes ? first_rank(r.node + 1) : rank + 1;
  const int ranks_here = std::max(1, end_rank - begin_rank);
  const int k = rank - begin_rank;
  const std::vector<int>& cpus = topology.nodes[static_cast<size_t>(r.node)];
  const int n = static_cast<int>(cpus.size());
  if (ranks_here >= n) {
    r.cpus = {cpus[static_cast<size_t>(k % n)]};
    return r;
  }
  const int lo = static_cast<int>(static_cast<int64_t>(k) * n / ranks_here);
  const int hi = static_cast<int>(static_cast<int64_t>(k + 1) * n / ranks_here);
  r.cpus.assign(cpus.begin() + lo, cpus.begin() + hi);
  return r;
}

bool bind_process_to(const std::vector<int>& cpus, std::string* why) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    if (why) *why = std::strerror(errno);
    return false;
  }
  // sched_setaffinity binds the calling thread; threads started later inherit it. OpenMP's
  // pool may already exist: each of its threads binds itself too.
  int failures = 0;
#pragma omp parallel reduction(+ : failures)
  failures += sched_setaffinity(0, sizeof set, &set) != 0 ? 1 : 0;
  if (failures > 0) {
    if (why) *why = "an OpenMP thread could not be bound";
    return false;
  }
  return true;
}

}  // namespace zt
