// zerotrain estimate through the binary: the table, the JSON the issue names, and bad
// input as exit 2 naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/shell.h"

namespace {

using zt::testing::sh;
using zt::testing::zerotrain_binary;

TEST(EstimateCli, JsonHasBothSidesAndTheTablePrints) {
  const auto r = sh(zerotrain_binary() + " estimate --model gpt2-xl --stage 3 --gpus-per-node 8 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  for (const char* key : {"gpu_bytes_per_gpu", "cpu_bytes_per_node", "activation_bytes_per_gpu"})
    EXPECT_GT(j["zerotrain"].value(key, int64_t{-1}), -1) << key;
  EXPECT_GT(j["deepspeed"]["gpu_bytes_per_gpu"].get<int64_t>(), 0);
  EXPECT_GT(j["deepspeed"]["cpu_bytes_per_node"].get<int64_t>(), 0);
  EXPECT_EQ(j["inputs"]["effective_stage"].get<int>(), 3);
  const auto t = sh(zerotrain_binary() + " estimate --model llama-3.2-1b --offload-optimizer cpu");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("DeepSpeed (model states only)"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("not implemented"), std::string::npos) << t.out;  // optimizer offload runs
  const auto p = sh(zerotrain_binary() + " estimate --model llama-3.2-1b --stage 3 --offload-param cpu");
  ASSERT_EQ(p.rc, 0) << p.out;
  EXPECT_NE(p.out.find("offload_param takes effect only together with offload_optimizer (cpu or nvme)"),
            std::string::npos)
      << p.out;
  const auto n = sh(zerotrain_binary() + " estimate --model llama-3.2-1b --stage 3 --offload-param nvme --json");
  ASSERT_EQ(n.rc, 0) << n.out;
  const auto q = sh(zerotrain_binary() + " estimate --model llama-3.2-1b --stage 3 --offload-param nvme");
  EXPECT_EQ(q.out.find("not implemented"), std::string::npos) << q.out;  // parameter offload to NVMe runs
  EXPECT_NE(q.out.find("offload_param takes effect only together with offload_optimizer"), std::string::npos) << q.out;
  const auto both = sh(zerotrain_binary() +
                       " estimate --model llama-3.2-1b --stage 3 --offload-param nvme --offload-optimizer cpu");
  ASSERT_EQ(both.rc, 0) << both.out;
  EXPECT_NE(both.out.find("offload_param nvme with DeepSpeed's defaults"), std::string::npos) << both.out;
}

TEST(EstimateCli, BadInputExits2NamingTheFlag) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {Case{"--model gpt2 --stage 5", "--stage 5"},
                        Case{"--model gpt2 --stage 2 --offload-param cpu", "--offload-param cpu"},
                        Case{"--model gtp2", "did you mean 'gpt2'"},
                        Case{"--model gpt2 --offload-optimizer disk", "--offload-optimizer 'disk'"},
                        Case{"--stage 2", "give --model"}}) {
    const auto r = sh(zerotrain_binary() + " estimate " + c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
}

}  // namespace
