// Two hosts for real: network namespaces joined by veth links through a bridge namespace.
// The coordinator runs in one namespace, a troika-agent with two ranks in each of two others;
// allreduce, allgather and broadcast must be correct across the links, hierarchically by
// default (the namespaces share /dev/shm and the IPC namespace, so a node is the agent's
// --host, not what shm_open can reach) and flat over Gloo with Horovod's settings at 0. Needs root
// (CAP_SYS_ADMIN and CAP_NET_ADMIN): skips, saying why, where it cannot create namespaces or cannot
// enter them (a chroot, some containers).

#include <signal.h>
#include <unistd.h>

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/launcher_helpers.h"
#include "tests/integration/netns_hosts.h"

namespace troika::testing {
namespace {

using ::testing::HasSubstr;

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeScratchDir("netns");
    hosts_ = std::make_unique<NetnsHosts>(absl::StrCat("tk", getpid() % 100000), "10.231.0", dir_);
    if (std::string why = hosts_->Unavailable(); !why.empty()) GTEST_SKIP() << why;
    // c (coordinator), a and b (agents): 10.231.0.1, .2 and .3.
    ASSERT_TRUE(hosts_->Create({"c", "a", "b"}));
  }

  pid_t StartIn(const std::string& host, const std::string& command, const std::string& log) {
    return hosts_->Start(host, command, log);
  }

  // Starts the coordinator and an agent of two `rank_binary` ranks on each host, `env` set
  // for the agents (and so their ranks); the agents' pids.
  std::vector<pid_t> StartJob(const std::string& env, const std::string& rank_binary) {
    StartIn("c", absl::StrCat(COORDINATOR_BINARY, " --listen=10.231.0.1:7070 --plaintext"),
            "coordinator");
    std::vector<pid_t> agents;
    int octet = 2;
    for (const char* host : {"a", "b"}) {
      agents.push_back(StartIn(
          host,
          absl::StrCat("env ", env, " ", AGENT_BINARY,
                       " --plaintext=true --coordinator=10.231.0.1:7070 --job=netns --nnodes=2",
                       " --nproc-per-node=2 --node_rank=", octet - 2, " --host=host-", host,
                       " --data_host=10.231.0.", octet, " -- ", rank_binary),
          absl::StrCat("agent-", host)));
      ++octet;
    }
    return agents;
  }

  // StartJob of check ranks; every rank must check ok. Returns the agents' logs.
  std::string RunCheckJob(const std::string& env) {
    std::vector<pid_t> agents = StartJob(env, CHECK_RANK_BINARY);
    std::string all;
    for (size_t i = 0; i < agents.size(); ++i) {
      int code = WaitWithTimeout(agents[i], absl::Seconds(60));
      const std::string log = absl::StrCat(dir_, "/agent-", i == 0 ? "a" : "b");
      all += ReadFile(log + ".out") + ReadFile(log + ".err");
      EXPECT_EQ(code, 0) << ReadFile(log + ".out") << ReadFile(log + ".err");
    }
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_THAT(all, HasSubstr(absl::StrCat("check ok on rank ", rank, " of 4 (host host-",
                                              rank < 2 ? "a" : "b", ")")));
    }
    return all;
  }

  std::string dir_;
  std::unique_ptr<NetnsHosts> hosts_;
};

// The default data plane across hosts of two ranks each: hierarchical (shared memory within
// a host, Gloo between the hosts' first ranks), as rank 0's log says.
TEST_F(NetnsTest, AllreduceAllgatherAndBroadcastAcrossTwoHostsRunHierarchically) {
  const std::string logs = RunCheckJob("TROIKA_TRANSPORT=auto");
  EXPECT_THAT(logs, HasSubstr("(4 ranks): 2 nodes: shared memory within a node, Gloo between "
                              "nodes (allreduce hierarchical, allgather hierarchical)"));
  // The process set of ranks 0-2 (check_rank.cc): 2 on host-a, 1 on host-b, chosen alike.
  EXPECT_THAT(logs, HasSubstr("(3 ranks): 2 nodes: shared memory within a node, Gloo between "
                              "nodes"));
}

// Horovod's settings at 0 make the same job flat over Gloo.
TEST_F(NetnsTest, HorovodsHierarchicalSettingsAtZeroRunFlatOverGloo) {
  const std::string logs =
      RunCheckJob("HOROVOD_HIERARCHICAL_ALLREDUCE=0 HOROVOD_HIERARCHICAL_ALLGATHER=0");
  EXPECT_THAT(logs, HasSubstr("(4 ranks): 2 nodes, hierarchical collectives turned off: Gloo"));
}

// A rank killed mid-allreduce on a hierarchical job: every other rank, on both hosts, fails
// within 5 s, and their errors name the dead rank (the coordinator's abort reaches the other
// host's ranks; the data plane's own error there is a broken Gloo connection). Rank 3 is
// host-b's second rank (no leader); rank 2 leads host-b.
class NetnsKillTest : public NetnsTest, public ::testing::WithParamInterface<int> {};

TEST_P(NetnsKillTest, KilledRankFailsEveryOtherRankOnBothHostsWithinFiveSeconds) {
  const int victim = GetParam();
  std::vector<pid_t> agents = StartJob(absl::StrCat("FAULT_DIR=", dir_), FAULT_RANK_BINARY);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ReadRankPids(dir_, 4).size() < 4 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::vector<pid_t> pids = ReadRankPids(dir_, 4);
  ASSERT_EQ(pids.size(), 4u) << ReadFile(dir_ + "/agent-a.err") << ReadFile(dir_ + "/agent-b.err");
  const int64_t killed_ms = absl::ToUnixMillis(absl::Now());
  ASSERT_EQ(kill(pids[victim], SIGKILL), 0);
  std::string out;
  for (size_t i = 0; i < agents.size(); ++i) {
    EXPECT_NE(WaitWithTimeout(agents[i], absl::Seconds(30)), -1) << "agent " << i;
    out += ReadFile(absl::StrCat(dir_, "/agent-", i == 0 ? "a" : "b", ".out"));
  }
  for (int r = 0; r < 4; ++r) {
    if (r == victim) continue;
    std::smatch m;
    const std::regex line(absl::StrCat("\\[", r, "\\] error-at (\\d+) ([^\\n]*)"));
    ASSERT_TRUE(std::regex_search(out, m, line)) << "rank " << r << " saw no error:\n" << out;
    EXPECT_LE(std::stoll(m[1]) - killed_ms, 5000) << "rank " << r << " learned too late";
    EXPECT_THAT(m[2].str(), HasSubstr(absl::StrCat("rank ", victim))) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Victims, NetnsKillTest, ::testing::Values(2, 3),
                         [](const auto& info) { return "rank_" + std::to_string(info.param); });

}  // namespace
}  // namespace troika::testing
