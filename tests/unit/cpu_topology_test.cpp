// core/cpu_topology.h: cpulist parsing, and how the ranks of a machine share its NUMA
// nodes and cores (ZeRO-Offload's host work, train/rank_binding.cpp).
#include "core/cpu_topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace zt {
namespace {

TEST(CpuTopology, CpuListsParseAndFormat) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(parse_cpu_list("5"), std::vector<int>{5});
  for (const char* bad : {"a", "3-1", "1,,2", "-1", "1-", "0-3;4"}) EXPECT_FALSE(parse_cpu_list(bad)) << bad;
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({7}), "7");
}

CpuTopology two_sockets() {  // 2 nodes x 8 cores, the second socket numbered 8-15
  CpuTopology t;
  t.nodes = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
  return t;
}

// Every rank gets a non-empty block inside one node; with no more ranks than cores the
// blocks are disjoint and cover the cores; ranks fill the nodes in order.
TEST(CpuTopology, RanksGetDisjointBlocksInsideOneNode) {
  const CpuTopology t = two_sockets();
  for (int L : {1, 2, 3, 4, 8, 16}) {
    std::multiset<int> used;
    int last_node = 0;
    for (int r = 0; r < L; ++r) {
      const RankCpus m = rank_cpus(t, r, L);
      ASSERT_FALSE(m.cpus.empty()) << L << " ranks, rank " << r;
      EXPECT_GE(m.node, last_node) << "nodes in rank order";
      last_node = m.node;
      const auto& node = t.nodes[static_cast<size_t>(m.node)];
      for (int c : m.cpus) EXPECT_TRUE(std::count(node.begin(), node.end(), c)) << c << " outside node " << m.node;
      used.insert(m.cpus.begin(), m.cpus.end());
    }
    for (int c : used) EXPECT_EQ(used.count(c), 1u) << L << " ranks share CPU " << c;
    if (L >= 2) {
      EXPECT_EQ(used.size(), 16u) << L << " ranks leave cores idle";
    }
  }
  EXPECT_EQ(rank_cpus(t, 0, 4).cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(rank_cpus(t, 2, 4).cpus, (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(rank_cpus(t, 0, 8).cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(rank_cpus(t, 4, 8).cpus, (std::vector<int>{8, 9}));
  EXPECT_EQ(rank_cpus(t, 7, 8).node, 1);
  EXPECT_EQ(rank_cpus(t, 1, 2).cpus, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
}

// More ranks than cores share them round-robin; fewer ranks than nodes take one node each.
TEST(CpuTopology, OversubscribedAndSparseCases) {
  CpuTopology one;
  one.nodes = {{0, 1}};
  EXPECT_EQ(rank_cpus(one, 0, 4).cpus, std::vector<int>{0});
  EXPECT_EQ(rank_cpus(one, 1, 4).cpus, std::vector<int>{1});
  EXPECT_EQ(rank_cpus(one, 2, 4).cpus, std::vector<int>{0});
  CpuTopology four;
  four.nodes = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  EXPECT_EQ(rank_cpus(four, 1, 2).node, 1);
  EXPECT_EQ(rank_cpus(four, 1, 2).cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(rank_cpus(four, 2, 3).node, 2);
}

// The machine's own topology lists only CPUs this process may use, each once.
TEST(CpuTopology, ThisMachinesTopologyIsConsistent) {
  const CpuTopology t = read_cpu_topology();
  ASSERT_FALSE(t.nodes.empty());
  const std::vector<int> allowed = allowed_cpus();
  std::set<int> seen;
  for (const auto& node : t.nodes)
    for (int c : node) {
      EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), c)) << c;
      EXPECT_TRUE(seen.insert(c).second) << c;
    }
}

}  // namespace
}  // namespace zt
