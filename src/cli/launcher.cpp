#include "cli/launcher.h"
#include "core/strings.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/cuda_api.h"
#include "core/error.h"
#include "io/bounded_file.h"
#include "comm/env.h"
#include "config/accelerate_config.h"
#include "config/config_value.h"

extern char** environ;

namespace zt::cli {

// The Accelerate config reader (config/accelerate_config.h) is the config layer's.
using config::accelerate_top_level_keys;
using config::AccelerateConfig;
using config::did_you_mean;
using config::load_document;
using config::parse_accelerate_config;

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------
// Hostfile

std::vector<HostSlots> parse_hostfile_text(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string host, slots_word, extra;
    if (!(words >> host)) continue;  // blank line or comment
    const std::string where = source + ":" + std::to_string(number);
    if (!(words >> slots_word) || slots_word.rfind("slots=", 0) != 0 || (words >> extra)) {
      ZT_THROW_INPUT(where, ": expected 'hostname slots=N' (DeepSpeed hostfile format), got '", line,
                     "'; write one host per line, e.g. 'worker-1 slots=8'");
    }
    const std::string count = slots_word.substr(6);
    char* end = nullptr;
    const long slots = std::strtol(count.c_str(), &end, 10);
    if (count.empty() || *end != '\0' || slots < 1 || slots > 1 << 20)
      ZT_THROW_INPUT(where, ": slots=", count, " is not a number of processes >= 1");
    for (const HostSlots& h : hosts)
      if (h.host == host)
        ZT_THROW_INPUT(where, ": host ", host, " is listed twice; give it one line with all its slots");
    hosts.push_back({host, static_cast<int>(slots)});
  }
  if (hosts.empty())
    ZT_THROW_INPUT(source, ": the hostfile lists no hosts; write one line per host: 'hostname slots=N'");
  return hosts;
}

std::vector<HostSlots> parse_hostfile(const std::string& path) {
  return parse_hostfile_text(io::read_bounded_file(path, "hostfile"), path);
}

// ---------------------------------------------------------------------------------------
// Context

namespace {

// A port no one listens on now (what torchrun --standalone's rendezvous takes): the kernel's
// choice for a socket bound to port 0 on the loopback. 29500 when that fails.
int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

}  // namespace

LaunchContext LaunchContext::current() {
  LaunchContext c;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) c.env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  c.is_root = ::geteuid() == 0;
  std::error_code ec;
  c.self_exe = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) c.self_exe = "zerotrain";
  // The CPUs this process may use (a container or taskset may allow fewer than exist).
  cpu_set_t set;
  c.cpu_count = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  c.gpu_count = [] { return cuda::device_count(); };
  c.free_port = pick_free_port;
  return c;
}

const char* LaunchContext::get(const std::string& name) const {
  for (const auto& kv : env)
    if (kv.first == name) return kv.second.c_str();
  return nullptr;
}

namespace {

// The program's path on the context's PATH, or "" when it is not there.
std::string find_program(const std::string& name, const LaunchContext& ctx) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = ctx.get("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

int env_int(const LaunchContext& ctx, const char* name, int fallback) {
  const char* v = ctx.get(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 1 << 20)
    ZT_THROW_INPUT("environment variable ", name, "='", v, "' is not a positive integer; fix or unset it");
  return static_cast<int>(n);
}

// The first host of a SLURM node list: "gpu[03-04,07],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& list) {
  const size_t stop = list.find_first_of(",[");
  if (stop == std::string::npos || list[stop] == ',') return list.substr(0, stop);
  const size_t close = list.find(']', stop);
  if (close == std::string::npos) return list.substr(0, stop);
  const std::string first = list.substr(stop + 1, list.find_first_of("-,]", stop + 1) - stop - 1);
  const std::string suffix = list.substr(close + 1, list.find(',', close) - close - 1);
  return list.substr(0, stop) + first + suffix;
}

// ---------------------------------------------------------------------------------------
// Launch values of an Accelerate config file

struct ConfigLaunch {
  std::optional<int> num_processes, num_machines, machine_rank, main_process_port;
  std::string main_process_ip, hostfile, gpu_ids, include, exclude;
  // Its settings that only the training command reads (for the note when there is none).
  std::vector<std::string> training_keys;
};

// DeepSpeed configs share only fp16/bf16 with Accelerate's top-level keys: any other
// Accelerate key marks the document as an Accelerate config.
bool is_accelerate_document(const json& doc) {
  const auto& keys = accelerate_top_level_keys();
  for (const auto& kv : doc.items())
    if (kv.key() != "fp16" && kv.key() != "bf16" && std::find(keys.begin(), keys.end(), kv.key()) != keys.end())
      return true;
  return false;
}

std::optional<ConfigLaunch> read_config_launch(const std::string& path, std::vector<std::string>& notes) {
  const json doc = load_document(path);
  if (!doc.empty() && !is_accelerate_document(doc)) {
    // `--config_file ds_config.json` is a common mix-up; the file belongs to the training command.
    notes.push_back(path +
                    " has no Accelerate keys (a DeepSpeed config?), so it sets no launch values; "
                    "give it to the training command instead (zerotrain train --deepspeed " +
                    path + ")");
    return std::nullopt;
  }
  const AccelerateConfig acc = parse_accelerate_config(doc, path);  // validates, with its messages
  const auto written = [&](const char* key) { return doc.contains(key) && !doc[key].is_null(); };
  ConfigLaunch c;
  if (written("num_processes")) c.num_processes = acc.launch.num_processes;
  if (written("num_machines")) c.num_machines = acc.launch.num_machines;
  if (written("machine_rank")) c.machine_rank = acc.launch.machine_rank;
  if (written("main_process_port")) c.main_process_port = acc.launch.main_process_port;
  c.main_process_ip = acc.launch.main_process_ip;
  c.hostfile = acc.launch.deepspeed_hostfile;
  if (lower(acc.launch.gpu_ids) != "all") c.gpu_ids = acc.launch.gpu_ids;
  c.include = acc.launch.deepspeed_inclusion_filter;
  c.exclude = acc.launch.deepspeed_exclusion_filter;
  // ZeRO through DeepSpeed or FSDP (stage 2 / 3 without a block saying more) is a training setting.
  const std::string& type = acc.launch.distributed_type;
  if (type == "DEEPSPEED" || type == "FSDP") c.training_keys.push_back("distributed_type " + type);
  for (const char* key : {"mixed_precision", "use_cpu", "deepspeed_config", "fsdp_config", "fp16", "bf16"})
    if (written(key)) c.training_keys.push_back(key);
  return c;
}

// ---------------------------------------------------------------------------------------
// Layout: how many processes on which nodes

// A count and where it was given ("--nnodes/--num_machines", "acc.yaml: num_machines");
// `from` is empty when nobody gave it.
struct Given {
  int value = 0;
  std::string from;
  bool given() const { return !from.empty(); }
};

Given given_if(bool given, int value, const std::string& from) { return given ? Given{value, from} : Given{}; }

struct Layout {
  int world = 1;
  int nnodes = 1;
  std::vector<HostSlots> hosts;  // from a hostfile; empty otherwise
  std::string master_addr;
  int master_port = 29500;
  // The GPUs each node's ranks see (--include, --gpu_ids, ...); empty: whatever they see.
  std::vector<NodeGpus> node_gpus;
};

std::string describe(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const HostSlots& h : hosts) s += (s.empty() ? "" : ", ") + h.host + " slots=" + std::to_string(h.slots);
  return s;
}

Layout layout_from_hostfile(const std::string& hostfile, const Given& nproc, const Given& total, const Given& nodes) {
  Layout l;
  l.hosts = parse_hostfile(hostfile);
  const int n = static_cast<int>(l.hosts.size());
  int sum = 0;
  for (const HostSlots& h : l.hosts) sum += h.slots;
  const std::string listing = describe(l.hosts);
  if (nodes.given() && nodes.value != n)
    ZT_THROW_INPUT(hostfile, ": lists ", n, " host(s) (", listing, ") but ", nodes.from, " is ", nodes.value, "; list ",
                   nodes.value, " hosts in the hostfile, or set ", nodes.from, " to ", n,
                   " (or leave it out: the hostfile decides)");
  if (total.given() && total.value != sum)
    ZT_THROW_INPUT(hostfile, ": the slots add up to ", sum, " processes (", listing, ") but ", total.from, " asks for ",
                   total.value, "; make the slots add up to ", total.value, ", or set ", total.from, " to ", sum,
                   " (or leave it out: the hostfile decides)");
  if (nproc.given())
    for (const HostSlots& h : l.hosts)
      if (h.slots != nproc.value)
        ZT_THROW_INPUT(hostfile, ": host ", h.host, " has slots=", h.slots, " but ", nproc.from, " is ", nproc.value,
                       "; give every host slots=", nproc.value, ", or leave ", nproc.from,
                       " out (the hostfile's slots decide)");
  l.world = sum;
  l.nnodes = n;
  return l;
}

Layout layout_from_counts(const Given& nproc, const Given& total, const Given& nodes, bool slurm,
                          const LaunchContext& ctx) {
  Layout l;
  // Inside a SLURM allocation its node and task counts are the defaults.
  const bool slurm_nodes = slurm && !nodes.given();
  l.nnodes = nodes.given() ? nodes.value
             : slurm_nodes ? env_int(ctx, "SLURM_JOB_NUM_NODES", env_int(ctx, "SLURM_NNODES", 1))
                           : 1;
  const std::string nodes_from = nodes.given() ? nodes.from : slurm_nodes ? "the SLURM allocation" : "the default";
  if (nproc.given() && total.given() && nproc.value * l.nnodes != total.value)
    ZT_THROW_INPUT(total.from, " is ", total.value, " but ", nproc.from, " ", nproc.value, " x ", l.nnodes,
                   " node(s) (", nodes_from, ") is ", nproc.value * l.nnodes, "; give one of them (", total.from,
                   " counts the processes of all nodes together)");
  l.world = total.given()   ? total.value
            : nproc.given() ? nproc.value * l.nnodes
            : slurm         ? env_int(ctx, "SLURM_NTASKS", l.nnodes)
                            : 1;
  if (l.world % l.nnodes != 0)
    ZT_THROW_INPUT(total.given() ? total.from : "the job", ": ", l.world, " processes do not split evenly over ",
                   l.nnodes, " node(s) (", nodes_from, "); use a multiple of ", l.nnodes, " processes");
  return l;
}

// DeepSpeed's selection (--include, --exclude, --num_nodes, --num_gpus) over the hostfile's
// hosts or this machine's GPUs: the hosts and a rank per chosen GPU. Counts given besides
// must agree with it.
Layout layout_from_selection(const GpuSelection& s, const std::string& hostfile, const Given& nproc, const Given& total,
                             const Given& nodes, const LaunchContext& ctx) {
  GpuPool pool;
  if (!hostfile.empty()) {
    pool.name = "hostfile " + hostfile;
    for (const HostSlots& h : parse_hostfile(hostfile)) {
      NodeGpus node{h.host, {}};
      for (int g = 0; g < h.slots; ++g) node.gpus.push_back(g);
      pool.nodes.push_back(std::move(node));
    }
  } else {
    const int n = ctx.gpus();
    pool.name = n > 0 ? "this machine (CUDA sees " + std::to_string(n) + " GPUs)" : "this machine";
    pool.open = n == 0;
    NodeGpus local{"localhost", {}};
    for (int g = 0; g < n; ++g) local.gpus.push_back(g);
    pool.nodes.push_back(std::move(local));
  }
  Layout l;
  l.node_gpus = select_gpus(pool, s);
  const std::string what = !s.include.empty()   ? "--include " + s.include
                           : !s.exclude.empty() ? "--exclude " + s.exclude
                           : s.num_gpus > 0     ? "--num_gpus " + std::to_string(s.num_gpus)
                                                : "--num_nodes " + std::to_string(s.num_nodes);
  l.world = 0;
  std::string listing;
  for (const NodeGpus& n : l.node_gpus) {
    l.world += static_cast<int>(n.gpus.size());
    listing += (listing.empty() ? "" : ", ") + n.host + ":" + gpu_list_text(n.gpus);
    if (!hostfile.empty()) l.hosts.push_back({n.host, static_cast<int>(n.gpus.size())});
  }
  l.nnodes = static_cast<int>(l.node_gpus.size());
  if (total.given() && total.value != l.world)
    ZT_THROW_INPUT(total.from, " asks for ", total.value, " processes but ", what, " chooses ", l.world, " GPU(s) (",
                   listing, "), one process each; give one of them");
  if (nodes.given() && nodes.value != l.nnodes)
    ZT_THROW_INPUT(nodes.from, " is ", nodes.value, " but ", what, " chooses ", l.nnodes, " node(s) (", listing,
                   "); give one of them");
  if (nproc.given())
    for (const NodeGpus& n : l.node_gpus)
      if (static_cast<int>(n.gpus.size()) != nproc.value)
        ZT_THROW_INPUT(nproc.from, " is ", nproc.value, " but ", what, " chooses ", n.gpus.size(), " GPU(s) on ",
                       n.host, " (", listing, "); give one of them");
  return l;
}

// torchrun's --nproc-per-node gpu|cpu|auto.
Given processes_per_node_word(ProcessesPerNode word, const LaunchContext& ctx) {
  const int gpus = word == ProcessesPerNode::Cpu ? 0 : ctx.gpus();
  if (word == ProcessesPerNode::Gpu && gpus == 0)
    ZT_THROW_INPUT("--nproc-per-node gpu: CUDA sees no GPU here; give a number of processes (CPU ranks)");
  const bool by_gpu = word == ProcessesPerNode::Gpu || (word == ProcessesPerNode::Auto && gpus > 0);
  const char* name = word == ProcessesPerNode::Gpu ? "gpu" : word == ProcessesPerNode::Cpu ? "cpu" : "auto";
  return {by_gpu ? gpus : ctx.cpu_count,
          std::string("--nproc-per-node ") + name + (by_gpu ? " (one per GPU)" : " (one per CPU)")};
}

// torchrun's rendezvous flags, as rank 0's address: --rdzv_endpoint HOST[:PORT] ([v6]:PORT
// too); --rdzv_backend c10d or static (both meet at that address); others need a server
// zerotrain has no use for.
void apply_rendezvous(const LaunchOptions& o, std::string& addr, int& port) {
  if (!o.rdzv_backend.empty()) {
    const std::string b = lower(o.rdzv_backend);
    if (b == "etcd" || b == "etcd-v2")
      ZT_THROW_INPUT("--rdzv_backend ", o.rdzv_backend,
                     ": zerotrain's ranks meet through mpirun or srun, not an etcd server; use --rdzv_backend c10d "
                     "(or leave it out) with --rdzv_endpoint HOST:PORT for rank 0's address");
    if (b != "c10d" && b != "static")
      ZT_THROW_INPUT("--rdzv_backend '", o.rdzv_backend, "' is not one of c10d, static",
                     did_you_mean(b, {"c10d", "static"}));
  }
  if (o.rdzv_endpoint.empty()) return;
  std::string host = o.rdzv_endpoint, port_text;
  if (host.front() == '[') {  // [v6 address]:port
    const size_t close = host.find(']');
    if (close == std::string::npos) ZT_THROW_INPUT("--rdzv_endpoint '", o.rdzv_endpoint, "': no closing ']'");
    if (close + 1 < host.size() && host[close + 1] == ':') port_text = host.substr(close + 2);
    host = host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    port_text = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (host.empty()) ZT_THROW_INPUT("--rdzv_endpoint '", o.rdzv_endpoint, "' names no host; write HOST:PORT");
  int endpoint_port = 0;
  if (!port_text.empty()) {
    char* end = nullptr;
    const long p = std::strtol(port_text.c_str(), &end, 10);
    if (*end != '\0' || p < 1 || p > 65535)
      ZT_THROW_INPUT("--rdzv_endpoint '", o.rdzv_endpoint, "': '", port_text, "' is not a port in 1..65535");
    endpoint_port = static_cast<int>(p);
  }
  if (!o.master_addr.empty() && o.master_addr != host)
    ZT_THROW_INPUT("--rdzv_endpoint ", o.rdzv_endpoint, " and --master-addr ", o.master_addr,
                   " name different hosts for rank 0; give one of them");
  if (endpoint_port != 0 && o.master_port != 0 && o.master_port != endpoint_port)
    ZT_THROW_INPUT("--rdzv_endpoint ", o.rdzv_endpoint, " and --master-port ", o.master_port,
                   " name different ports; give one of them");
  addr = host;
  if (endpoint_port != 0) port = endpoint_port;
}

bool is_this_host(const std::string& addr) {
  return addr.empty() || addr == "localhost" || addr == "127.0.0.1" || addr == "::1";
}

Layout resolve_layout(const LaunchOptions& o, const std::optional<ConfigLaunch>& yaml, const LaunchContext& ctx,
                      bool slurm) {
  Given nproc = given_if(o.nproc_per_node > 0, o.nproc_per_node, "--nproc-per-node");
  if (o.nproc_word != ProcessesPerNode::Number) nproc = processes_per_node_word(o.nproc_word, ctx);
  Given total = given_if(o.num_processes > 0, o.num_processes, "--num_processes");
  Given nodes = given_if(o.nnodes > 0, o.nnodes, "--nnodes/--num_machines");
  Given node_rank = given_if(o.node_rank >= 0, o.node_rank, "--node-rank/--machine_rank");
  std::string addr = o.master_addr, hostfile = o.hostfile, gpu_ids = o.gpu_ids;
  std::string gpu_ids_from = "--gpu_ids";
  int port = o.master_port;
  // DeepSpeed's --num_nodes alone, without a hostfile to take the first hosts of, counts nodes.
  GpuSelection selection = o.gpus;
  // The config file fills in what the command line leaves open.
  if (yaml) {
    const std::string in = o.config_file + ": ";
    // Its DeepSpeed filters choose the GPUs, as Accelerate passes them to deepspeed's launcher.
    if (!selection.given()) {
      selection.include = yaml->include;
      selection.exclude = yaml->exclude;
    }
    if (!nproc.given() && !total.given() && !selection.given() && yaml->num_processes)
      total = {*yaml->num_processes, in + "num_processes"};
    if (!nodes.given() && yaml->num_machines) nodes = {*yaml->num_machines, in + "num_machines"};
    if (!node_rank.given() && yaml->machine_rank) node_rank = {*yaml->machine_rank, in + "machine_rank"};
    if (addr.empty()) addr = yaml->main_process_ip;
    if (port == 0 && yaml->main_process_port) port = *yaml->main_process_port;
    if (hostfile.empty()) hostfile = yaml->hostfile;
    if (gpu_ids.empty()) {
      gpu_ids = yaml->gpu_ids;
      gpu_ids_from = in + "gpu_ids";
    }
  }
  if (lower(gpu_ids) == "all") gpu_ids.clear();
  const bool only_num_nodes = selection.include.empty() && selection.exclude.empty() && selection.num_gpus == 0;
  if (selection.num_nodes > 0 && only_num_nodes && hostfile.empty()) {
    if (nodes.given() && nodes.value != selection.num_nodes)
      ZT_THROW_INPUT("--num_nodes ", selection.num_nodes, " and ", nodes.from, " ", nodes.value,
                     " disagree; give one of them");
    nodes = {selection.num_nodes, "--num_nodes"};
    selection.num_nodes = 0;
  }
  apply_rendezvous(o, addr, port);
  if (o.standalone) {
    // torchrun --standalone: one node, rendezvous on this host at a port free now.
    if (!hostfile.empty())
      ZT_THROW_INPUT("--standalone runs on this node only, but the hostfile ", hostfile,
                     " names hosts; leave out one of them");
    if (nodes.given() && nodes.value != 1)
      ZT_THROW_INPUT("--standalone runs on one node, but ", nodes.from, " is ", nodes.value, "; leave out one of them");
    if (!o.rdzv_endpoint.empty() || !is_this_host(addr))
      ZT_THROW_INPUT("--standalone meets on this host, but ",
                     o.rdzv_endpoint.empty() ? "rank 0's address is " + addr : "--rdzv_endpoint is " + o.rdzv_endpoint,
                     "; leave out one of them");
    addr = "127.0.0.1";
    if (port == 0) port = ctx.free_port ? ctx.free_port() : 29500;
  }
  // Accelerate's --multi_gpu: one process per GPU when nothing else counts them.
  if (o.multi_gpu && !nproc.given() && !total.given() && hostfile.empty() && !selection.given()) {
    const int n = !gpu_ids.empty() ? static_cast<int>(parse_gpu_list(gpu_ids, gpu_ids_from).size()) : ctx.gpus();
    if (n == 0)
      ZT_THROW_INPUT(
          "--multi_gpu: CUDA sees no GPU here to start a process on each; give --num_processes N "
          "(N CPU ranks), or leave --multi_gpu out");
    nproc = {n, "--multi_gpu (one process per GPU)"};
  }

  Layout l = selection.given()  ? layout_from_selection(selection, hostfile, nproc, total, nodes, ctx)
             : hostfile.empty() ? layout_from_counts(nproc, total, nodes, slurm, ctx)
                                : layout_from_hostfile(hostfile, nproc, total, nodes);
  if (!gpu_ids.empty()) {
    // Accelerate's gpu_ids: the GPUs every node's ranks see, one rank each at most.
    if (selection.given())
      ZT_THROW_INPUT(gpu_ids_from,
                     " and DeepSpeed's --include/--exclude/--num_gpus both choose GPUs; give one of them");
    const std::vector<int> ids = parse_gpu_list(gpu_ids, gpu_ids_from);
    int per_node = l.world / l.nnodes;
    for (const HostSlots& h : l.hosts) per_node = std::max(per_node, h.slots);
    if (per_node > static_cast<int>(ids.size()))
      ZT_THROW_INPUT(gpu_ids_from, " lists ", ids.size(), " GPU(s) (", gpu_ids, ") but ", per_node,
                     " processes run per node; list a GPU per process, or start ", ids.size(), " per node");
    for (int n = 0; n < l.nnodes; ++n)
      l.node_gpus.push_back({l.hosts.empty() ? "localhost" : l.hosts[static_cast<size_t>(n)].host, ids});
  }
  if (node_rank.given() && node_rank.value >= l.nnodes)
    ZT_THROW_INPUT(node_rank.from, " is ", node_rank.value, " but the job has ", l.nnodes,
                   " node(s); node ranks are 0..", l.nnodes - 1);
  if (node_rank.given() && node_rank.value != 0)
    ZT_THROW_INPUT(node_rank.from, " is ", node_rank.value,
                   ": zerotrain launch starts the ranks of every node from one place (mpirun over ssh, or srun), "
                   "so run it once, on the first node (node rank 0), not once per node");
  const char* nodelist = ctx.get("SLURM_JOB_NODELIST") ? ctx.get("SLURM_JOB_NODELIST") : ctx.get("SLURM_NODELIST");
  l.master_addr = !addr.empty()                  ? addr
                  : !l.hosts.empty()             ? l.hosts[0].host
                  : slurm && nodelist != nullptr ? first_slurm_host(nodelist)
                                                 : "127.0.0.1";
  l.master_port = port > 0 ? port : 29500;
  return l;
}

// Variables of the launching environment that remote ranks need too.
bool forwarded_to_ranks(const std::string& name) {
  return name.rfind("ZT_", 0) == 0 || name.rfind("NCCL_", 0) == 0 || name == "OMP_NUM_THREADS";
}

void set_export(std::vector<std::pair<std::string, std::string>>& exports, const std::string& name,
                const std::string& value) {
  for (auto& kv : exports)
    if (kv.first == name) {
      kv.second = value;
      return;
    }
  exports.emplace_back(name, value);
}

bool has_resume_flag(const std::vector<std::string>& command) {
  return std::any_of(command.begin(), command.end(),
                     [](const std::string& a) { return a == "--resume" || a.rfind("--resume=", 0) == 0; });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Plan

LaunchPlan build_launch_plan(const LaunchOptions& o, const LaunchContext& ctx) {
  if (o.command.empty())
    ZT_THROW_INPUT(
        "launch: no command to run; put it after the options, e.g. "
        "zerotrain launch --nproc-per-node 2 -- zerotrain train run.yaml");
  LaunchPlan plan;
  std::optional<ConfigLaunch> yaml;
  if (!o.config_file.empty()) yaml = read_config_launch(o.config_file, plan.notes);
  // --standalone is this node's job, also inside a SLURM allocation.
  const bool slurm = ctx.get("SLURM_JOB_ID") != nullptr && !o.standalone;
  const std::string srun = slurm ? find_program("srun", ctx) : "";
  const Layout l = resolve_layout(o, yaml, ctx, !srun.empty());
  plan.world_size = l.world;
  plan.nnodes = l.nnodes;
  LaunchYaml for_training;
  if (yaml) {
    for_training.path = o.config_file;
    for_training.num_processes = yaml->num_processes;
    for_training.training_keys = yaml->training_keys;
  }
  plan.command = command_with_training_settings(o.command, o.training, for_training, l.world, plan.notes);
  // A hostfile names the hosts, which only mpirun takes; SLURM otherwise knows its nodes.
  plan.runner = !l.hosts.empty() ? Runner::Mpirun
                : !srun.empty()  ? Runner::Srun
                : l.world == 1   ? Runner::Direct
                                 : Runner::Mpirun;
  if (plan.runner == Runner::Mpirun && l.hosts.empty() && l.nnodes > 1)
    ZT_THROW_INPUT("launch: ", l.nnodes,
                   " nodes need a --hostfile naming them (one line per host: "
                   "'hostname slots=N'), or a SLURM allocation to run in");

  if (plan.runner == Runner::Direct) {
    plan.exports = {{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_WORLD_SIZE", "1"}};
  }
  plan.exports.emplace_back("MASTER_ADDR", l.master_addr);
  plan.exports.emplace_back("MASTER_PORT", std::to_string(l.master_port));
  // Every rank would start one CPU thread per core: share the cores between a node's ranks.
  int per_node = l.world / l.nnodes;
  for (const HostSlots& h : l.hosts) per_node = std::max(per_node, h.slots);
  if (o.threads_per_process > 0)
    plan.exports.emplace_back("ZT_NUM_THREADS", std::to_string(o.threads_per_process));
  else if (per_node > 1 && ctx.get("ZT_NUM_THREADS") == nullptr && ctx.get("OMP_NUM_THREADS") == nullptr)
    plan.exports.emplace_back("ZT_NUM_THREADS", std::to_string(std::max(1, ctx.cpu_count / per_node)));
  plan.exports.emplace_back("ZT_RESTART_COUNT", "0");
  // The chosen GPUs: the same list on every node is one variable for all ranks; different
  // lists are the rank wrapper's to set, node by node.
  std::string node_gpus;
  if (!l.node_gpus.empty()) {
    const bool same = std::all_of(l.node_gpus.begin(), l.node_gpus.end(),
                                  [&](const NodeGpus& n) { return n.gpus == l.node_gpus[0].gpus; });
    if (same)
      plan.exports.emplace_back("CUDA_VISIBLE_DEVICES", gpu_list_text(l.node_gpus[0].gpus));
    else
      node_gpus = node_gpus_text(l.node_gpus);
    if (const char* visible = ctx.get("CUDA_VISIBLE_DEVICES"))
      plan.notes.push_back(std::string("the GPUs chosen replace CUDA_VISIBLE_DEVICES=") + visible +
                           " of this shell (GPU numbers are the node's own, as DeepSpeed's are)");
  }

  if (plan.runner == Runner::Direct) return plan;
  plan.rank_wrapper = {ctx.self_exe.empty() ? "zerotrain" : ctx.self_exe, "launch", "--rank-env"};
  if (!node_gpus.empty()) plan.rank_wrapper.insert(plan.rank_wrapper.end(), {"--node-gpus", node_gpus});
  plan.rank_wrapper.push_back("--");
  const std::string world = std::to_string(l.world);
  if (plan.runner == Runner::Srun) {
    plan.launcher = {srun,
                     "--ntasks",
                     world,
                     "--nodes",
                     std::to_string(l.nnodes),
                     "--ntasks-per-node",
                     std::to_string(l.world / l.nnodes),
                     "--kill-on-bad-exit=1"};
    return plan;
  }
  const std::string mpirun = find_program("mpirun", ctx);
  if (mpirun.empty())
    ZT_THROW_INPUT("launch: mpirun is not on PATH, and ", l.world,
                   " processes need it; install OpenMPI "
                   "(apt-get install openmpi-bin), or for one process run the command directly");
  plan.launcher = {mpirun, "-np", world};
  if (ctx.is_root) plan.launcher.push_back("--allow-run-as-root");
  // Ranks are placed host by host in the hostfile's order, so local ranks are contiguous.
  std::string hosts = "localhost:" + world;
  if (!l.hosts.empty()) {
    hosts.clear();
    for (const HostSlots& h : l.hosts) hosts += (hosts.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  }
  plan.launcher.insert(plan.launcher.end(), {"--bind-to", "none", "--map-by", "slot", "--host", hosts});
  for (const auto& kv : ctx.env) {
    const bool ours =
        std::any_of(plan.exports.begin(), plan.exports.end(), [&](const auto& e) { return e.first == kv.first; });
    if (forwarded_to_ranks(kv.first) && !ours) plan.forwarded.push_back(kv.first);
  }
  std::sort(plan.forwarded.begin(), plan.forwarded.end());
  return plan;
}

std::vector<std::string> LaunchPlan::argv() const {
  std::vector<std::string> out = launcher;
  if (runner == Runner::Mpirun) {
    for (const auto& name : forwarded) out.insert(out.end(), {"-x", name});
    for (const auto& kv : exports) out.insert(out.end(), {"-x", kv.first + "=" + kv.second});
  } else if (runner == Runner::Srun) {
    std::string list = "--export=ALL";
    for (const auto& kv : exports) list += "," + kv.first + "=" + kv.second;
    out.push_back(list);
  }
  out.insert(out.end(), rank_wrapper.begin(), rank_wrapper.end());
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

std::vector<std::pair<std::string, std::string>> LaunchPlan::process_env() const {
  return runner == Runner::Direct ? exports : std::vector<std::pair<std::string, std::string>>{};
}

LaunchPlan plan_for_restart(const LaunchPlan& plan, int restart) {
  LaunchPlan next = plan;
  set_export(next.exports, "ZT_RESTART_COUNT", std::to_string(restart));
  if (is_zerotrain_train(next.command) && !has_resume_flag(next.command))
    next.command.insert(next.command.end(), {"--resume", "auto"});
  return next;
}

std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%+=:,./_-", c) != nullptr;
  });
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string format_plan(const LaunchPlan& plan) {
  std::string line;
  const auto add = [&](const std::string& word) { line += (line.empty() ? "" : " ") + word; };
  for (const auto& kv : plan.process_env()) add(kv.first + "=" + shell_quote(kv.second));
  for (const auto& a : plan.argv()) add(shell_quote(a));
  return line;
}

// ---------------------------------------------------------------------------------------
// Running

namespace {

// The job's process group while it runs (0: none), read by the signal handler.
std::atomic<pid_t> g_job_group{0};
static_assert(std::atomic<pid_t>::is_always_lock_free, "the signal handler needs a lock-free pid");
volatile std::sig_atomic_t g_forwarded_signal = 0;
// Whether the job is mpirun (Runner::Mpirun): OpenMPI's mpirun ends the job on SIGINT /
// SIGTERM (4.1.4 even delays that SIGTERM by odls_base_sigkill_timeout), but forwards
// SIGUSR1 to every rank on every node (4.1 and 5), which the trainer takes as a stop.
volatile std::sig_atomic_t g_job_is_mpirun = 0;

// Sends the job a stop signal: an mpirun job gets SIGUSR1 (to mpirun only, which passes it
// on), any other the signal itself, to its whole process group.
volatile std::sig_atomic_t g_sigints = 0;
void signal_job(pid_t group, int sig) {
  if (sig == SIGINT) g_sigints = g_sigints + 1;
  if (g_job_is_mpirun) {
    // A third SIGINT is the user's "now": mpirun gets it and ends the job (as the trainer
    // exits at once on a third SIGINT of its own).
    ::kill(group, sig == SIGINT && g_sigints >= 3 ? SIGINT : SIGUSR1);
  } else {
    ::kill(-group, sig);
  }
}

extern "C" void forward_signal(int sig) {
  g_forwarded_signal = sig;
  const pid_t group = g_job_group.load();
  if (group > 0) signal_job(group, sig);
}

// While alive, SIGINT/SIGTERM/SIGUSR1 reach the job instead of ending the launcher, which
// then waits for the job to stop (the trainer saves a checkpoint on them; signal_job says
// how an mpirun job gets them). Restores the old handlers.
class SignalForwarder {
 public:
  SignalForwarder() {
    g_forwarded_signal = 0;
    struct sigaction action {};
    action.sa_handler = forward_signal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
    ::sigaction(SIGUSR1, &action, &old_usr1_);
  }
  ~SignalForwarder() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGUSR1, &old_usr1_, nullptr);
  }
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;
  int received() const { return g_forwarded_signal; }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_usr1_ {};
};

// NUL-terminated char* arrays for exec, built before fork (the child must not allocate).
class CStrings {
 public:
  explicit CStrings(std::vector<std::string> words) : words_(std::move(words)) {
    for (auto& w : words_) pointers_.push_back(w.data());
    pointers_.push_back(nullptr);
  }
  CStrings(const CStrings&) = delete;
  CStrings& operator=(const CStrings&) = delete;
  char* const* data() const { return pointers_.data(); }

 private:
  std::vector<std::string> words_;
  std::vector<char*> pointers_;
};

// This process's environment with `overrides` replacing or adding variables.
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    const bool replaced =
        std::any_of(overrides.begin(), overrides.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) out.push_back(entry);
  }
  for (const auto& kv : overrides) out.push_back(kv.first + "=" + kv.second);
  return out;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int run_once(const LaunchPlan& plan) {
  const std::vector<std::string> args = plan.argv();
  if (find_program(args[0], LaunchContext::current()).empty())
    ZT_THROW_INPUT("launch: cannot run '", args[0], "': not an executable program (nor one on PATH)");
  const CStrings argv(args);
  const CStrings envp(environment_with(plan.process_env()));
  const std::string exec_failed = "zerotrain launch: cannot run '" + args[0] + "': ";
  // A background process group cannot read the terminal (it would stop on SIGTTIN):
  // the job reads nothing from a terminal, but keeps a pipe or file on stdin.
  const bool stdin_is_terminal = ::isatty(STDIN_FILENO) == 1;
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) ZT_THROW_IO("launch: cannot start a process: ", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    // The job must not outlive a launcher killed with SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(1);
    if (stdin_is_terminal) {
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    }
    ::execvpe(argv.data()[0], argv.data(), envp.data());
    const char* why = std::strerror(errno);
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    n = ::write(STDERR_FILENO, why, std::strlen(why));
    n = ::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: a signal may come before the child has run
  g_job_is_mpirun = plan.runner == Runner::Mpirun ? 1 : 0;
  g_job_group.store(pid);
  if (const int sig = g_forwarded_signal) signal_job(pid, sig);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      g_job_group.store(0);
      ZT_THROW_IO("launch: waiting for the job failed: ", std::strerror(errno));
    }
  }
  g_job_group.store(0);
  return exit_code_of(status);
}

}  // namespace

int run_launch(const LaunchPlan& plan, int max_restarts) {
  const SignalForwarder forwarder;
  for (int restart = 0;; ++restart) {
    const int code = run_once(restart == 0 ? plan : plan_for_restart(plan, restart));
    // A job stopped by the user's signal is not a failure to recover from.
    if (code == 0 || forwarder.received() != 0 || restart >= max_restarts) return code;
    std::fprintf(stderr, "zerotrain launch: job exited with code %d; restart %d/%d from the latest checkpoint\n", code,
                 restart + 1, max_restarts);
    std::fflush(stderr);
  }
}

// ---------------------------------------------------------------------------------------
// Rank wrapper

namespace {

// The launcher's own variables: torchrun's names are hidden, since the wrapper is about to
// set them and any inherited ones (from the launching shell) would be stale.
const char* launcher_variable(const char* name) {
  for (const char* ours : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})
    if (std::strcmp(name, ours) == 0) return nullptr;
  return std::getenv(name);
}

}  // namespace

void exec_as_rank(const std::vector<std::string>& command, const std::string& node_gpus) {
  if (command.empty()) ZT_THROW_INPUT("launch --rank-env: no command to run after --");
  const comm::LaunchEnv env = comm::read_launch_env(launcher_variable);
  if (!node_gpus.empty()) ::setenv("CUDA_VISIBLE_DEVICES", gpu_list_text(gpus_of_rank(node_gpus, env.rank)).c_str(), 1);
  ::setenv("RANK", std::to_string(env.rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(env.local_rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(env.world_size).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(env.local_world_size).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 0);
  ::setenv("MASTER_PORT", "29500", 0);
  const CStrings argv(command);
  ::execvp(argv.data()[0], argv.data());
  ZT_THROW_INPUT("launch: rank ", env.rank, " cannot run '", command[0], "': ", std::strerror(errno));
}

}  // namespace zt::cli
