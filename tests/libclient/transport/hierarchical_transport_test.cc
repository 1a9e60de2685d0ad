// What only the "auto" and "hierarchical" transports do: learning the ranks' nodes, choosing
// a data plane from them, the flat settings, and a
// killed rank failing every survivor on both simulated nodes. Ranks are threads on simulated
// nodes (simulated_nodes.h) or forked processes; the collective matrix over them is in
// collectives_test.cc, what every transport does in transport_conformance_test.cc.

#include "libclient/transport/hierarchical/hierarchical_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libclient/transport/hierarchical/node_map.h"
#include "libclient/transport/hierarchical/pipelined_allreduce.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "tests/libclient/transport/collective_checks.h"
#include "tests/libclient/transport/process_group.h"
#include "tests/libclient/transport/simulated_nodes.h"

namespace troika::transport {
namespace {

using Clock = std::chrono::steady_clock;
using conformance::Comms;
using conformance::ProcessGroup;

TEST(NodeMapTest, NumbersNodesByTheirLowestRankAndListsTheirRanksInOrder) {
  const NodeMap map = MakeNodeMap({"b", "a", "b", "c", "a"});
  EXPECT_EQ(map.names, (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(map.node_of, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(map.ranks, (std::vector<std::vector<int>>{{0, 2}, {1, 4}, {3}}));
  EXPECT_EQ(map.LocalIndex(4), 1);
  EXPECT_EQ(map.LocalIndex(3), 0);
  EXPECT_TRUE(map.AnyNodeShared());
  EXPECT_FALSE(MakeNodeMap({"a", "b"}).AnyNodeShared());
}

TEST(ChooseDataPlaneTest, OneNodeIsSharedMemory) {
  EXPECT_EQ(ChooseDataPlane(MakeNodeMap({"a", "a", "a"}), {}).kind, Choice::kShm);
  EXPECT_EQ(ChooseDataPlane(MakeNodeMap({"a"}), {}).kind, Choice::kShm);
  // Horovod's settings only concern communicators that span nodes.
  EXPECT_EQ(ChooseDataPlane(MakeNodeMap({"a", "a"}), {false, false}).kind, Choice::kShm);
}

TEST(ChooseDataPlaneTest, NodesOfSeveralRanksAreHierarchicalUnlessTurnedOff) {
  const NodeMap map = MakeNodeMap({"a", "b", "a", "b"});
  Choice c = ChooseDataPlane(map, {});
  EXPECT_EQ(c.kind, Choice::kHierarchical);
  EXPECT_TRUE(c.hierarchical_allreduce);
  EXPECT_TRUE(c.hierarchical_allgather);
  c = ChooseDataPlane(map, {.hierarchical_allreduce = false});
  EXPECT_EQ(c.kind, Choice::kHierarchical);
  EXPECT_FALSE(c.hierarchical_allreduce);
  EXPECT_TRUE(c.hierarchical_allgather);
  EXPECT_EQ(ChooseDataPlane(map, {false, false}).kind, Choice::kGloo);
  // Uneven nodes too: one of them shares.
  EXPECT_EQ(ChooseDataPlane(MakeNodeMap({"a", "b", "b"}), {}).kind, Choice::kHierarchical);
}

TEST(ChooseDataPlaneTest, OneRankPerNodeIsGlooUnlessForced) {
  EXPECT_EQ(ChooseDataPlane(MakeNodeMap({"a", "b", "c"}), {}).kind, Choice::kGloo);
  const Choice c = ChooseDataPlane(MakeNodeMap({"a", "b"}), {.hierarchical_allreduce = true});
  EXPECT_EQ(c.kind, Choice::kHierarchical);
  EXPECT_TRUE(c.hierarchical_allreduce);
  EXPECT_FALSE(c.hierarchical_allgather);
}

TEST(ExchangeNodesTest, EveryRankLearnsTheSameMapUnderThePrefix) {
  InMemoryStore store;
  std::vector<NodeMap> maps(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorSpec spec{.rank = r, .size = 3, .store_prefix = "p/", .node = r == 1 ? "y" : "x"};
      auto map = ExchangeNodes(spec, store);
      ASSERT_TRUE(map.ok()) << map.status();
      maps[r] = *map;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const NodeMap& map : maps) {
    EXPECT_EQ(map.names, (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(map.ranks, (std::vector<std::vector<int>>{{0, 2}, {1}}));
  }
  for (const std::string& key : store.Keys()) EXPECT_TRUE(absl::StartsWith(key, "p/")) << key;
}

TEST(ExchangeNodesTest, AnUnnamedNodeIsThisHost) {
  EXPECT_FALSE(NodeName({}).empty());
  EXPECT_EQ(NodeName({.node = "n7"}), "n7");
}

// Allreduce, reducescatter and allgather flat over Gloo (Horovod's settings at 0), on 2
// simulated nodes of 2 and 3 ranks: the same results.
class FlatSettingsTest : public ::testing::TestWithParam<int> {};

TEST_P(FlatSettingsTest, FlatAllreduceAndAllgatherMatchReference) {
  conformance::SimulatedNodesTransport transport(
      std::make_unique<HierarchicalTransport>(
          TransportOptions{.hierarchical_allreduce = false, .hierarchical_allgather = false}),
      2);
  InMemoryStore store;
  Comms comms = conformance::ConnectGroup(transport, store, GetParam(), "flat/");
  ASSERT_EQ(comms.size(), static_cast<size_t>(GetParam()));
  conformance::CheckAllreduce(comms);
  conformance::CheckReduceScatter(comms);
  conformance::CheckAllgatherv(comms);
  conformance::CheckBroadcast(comms);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FlatSettingsTest, ::testing::Values(4, 5));

// Tensors above 2 chunks take the pipelined allreduce (pipelined_allreduce.h): 3 chunks and a
// ragged one of float32, and of int64, summed and maxed, on nodes of several ranks, of one
// rank (a leader with no node-mates) and in blocks.
class PipelinedAllreduceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelinedAllreduceTest, LargeAllreducesMatchReference) {
  auto transport = conformance::CreateTestTransport(GetParam());
  ASSERT_TRUE(transport.ok()) << transport.status();
  InMemoryStore store;
  const int n = 4;
  Comms comms = conformance::ConnectGroup(**transport, store, n, "pipe/");
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  const size_t floats = 3 * (kPipelineChunkBytes / 4) + 12345;
  const size_t longs = 2 * (kPipelineChunkBytes / 8) + 7;
  conformance::OnEveryRank(comms, [&](int r) {
    std::vector<float> f(floats);
    for (size_t i = 0; i < floats; ++i) f[i] = static_cast<float>((r + 1) * (i % 13));
    ASSERT_TRUE(comms[r]->Allreduce(f.data(), floats, DataType::kFloat32, ReduceOp::kSum).ok());
    for (size_t i = 0; i < floats; ++i) {
      ASSERT_EQ(f[i], static_cast<float>(10 * (i % 13))) << "rank " << r << " element " << i;
    }
    std::vector<int64_t> l(longs);
    for (size_t i = 0; i < longs; ++i) l[i] = static_cast<int64_t>((i + r) % 17);
    ASSERT_TRUE(comms[r]->Allreduce(l.data(), longs, DataType::kInt64, ReduceOp::kMax).ok());
    for (size_t i = 0; i < longs; ++i) {
      int64_t expected = 0;
      for (int q = 0; q < n; ++q) expected = std::max<int64_t>(expected, (i + q) % 17);
      ASSERT_EQ(l[i], expected) << "rank " << r << " element " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Placements, PipelinedAllreduceTest,
                         ::testing::Values("hierarchical2", "hierarchical3", "hierarchical2b"));

// An elastic job's next generation (or a process set) connects under a new store prefix: a
// new hierarchical communicator of the ranks left, its parts made afresh, while the old one
// is dead.
TEST(HierarchicalGenerationsTest, ANewPrefixRebuildsItForTheRanksLeft) {
  conformance::SimulatedNodesTransport transport(
      std::make_unique<HierarchicalTransport>(TransportOptions{}), 2);
  InMemoryStore store;
  Comms first = conformance::ConnectGroup(transport, store, 5, "data/1/");
  ASSERT_EQ(first.size(), 5u);
  conformance::CheckAllreduce(first);
  for (auto& comm : first) comm->Abort();  // the generation ends
  int32_t x = 1;
  EXPECT_FALSE(first[0]->Allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).ok());
  Comms second = conformance::ConnectGroup(transport, store, 3, "data/2/");
  ASSERT_EQ(second.size(), 3u);
  conformance::CheckAllreduce(second);
  conformance::CheckAllgatherv(second);
}

// 4 processes on 2 simulated nodes (ranks 0, 2 on node0; 1, 3 on node1): a rank killed
// mid-allreduce of 16 MiB fails every survivor within 5 s, on its node and the other, and
// its node-mate names its pid. Victim 2 leads no node; victim 1 leads node1.
class HierarchicalKillTest : public ::testing::TestWithParam<int> {};

TEST_P(HierarchicalKillTest, KilledRankFailsEverySurvivorWithinFiveSeconds) {
  const int n = 4;
  const int victim = GetParam();
  const int mate = victim ^ 2;  // the victim's node-mate
  const std::string ready = conformance::MakeTempDir() + "/ready.";
  const std::string pid_file = ready + "victim";
  auto connect = [](const CommunicatorSpec& spec, Store& store) {
    conformance::SimulatedNodesTransport transport(
        std::make_unique<HierarchicalTransport>(TransportOptions{}), 2);
    return transport.Connect(spec, store);
  };
  ProcessGroup group(
      n,
      [&](Communicator& comm) {
        std::vector<float> data(4 << 20, 1.0f);
        absl::Status status;
        for (int round = 0; status.ok(); ++round) {
          status = comm.Allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
          if (round == 0 && status.ok()) std::ofstream(absl::StrCat(ready, comm.rank()));
        }
        EXPECT_FALSE(status.ok());
        std::fprintf(stderr, "rank %d: %s\n", comm.rank(), status.ToString().c_str());
        if (comm.rank() == mate) {
          std::ifstream in(pid_file);
          std::string pid;
          in >> pid;
          EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("(pid ", pid, ")")))
              << status;
        }
      },
      absl::Seconds(30), connect);
  std::ofstream(pid_file) << group.pids()[victim];
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int r = 0; r < n; ++r) {
    while (access(absl::StrCat(ready, r).c_str(), F_OK) != 0 && absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(group.pids()[victim], SIGKILL), 0);
  EXPECT_EQ(group.Wait(victim), 128 + SIGKILL);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(group.Wait(r, absl::Seconds(10)), 0) << "rank " << r;
    EXPECT_LT(Clock::now() - killed_at, std::chrono::seconds(5)) << "rank " << r;
  }
  EXPECT_TRUE(conformance::NamedSegments().empty());
}

INSTANTIATE_TEST_SUITE_P(Victims, HierarchicalKillTest, ::testing::Values(1, 2),
                         [](const auto& info) { return "rank_" + std::to_string(info.param); });

}  // namespace
}  // namespace troika::transport
