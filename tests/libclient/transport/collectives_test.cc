// The collective conformance checks (collective_checks.h) over every CPU transport, its ranks
// as threads of this process: Gloo over 127.0.0.1, shared memory, the in-memory fake, the
// hierarchical communicator with its ranks on 2 and 3 simulated nodes (simulated_nodes.h;
// interleaved, and in blocks: "2b"),
// and the default "auto" on one node (shared memory) and on 2 simulated nodes (hierarchical).
// Each transport connects through an InMemoryStore.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/transport.h"
#include "tests/libclient/transport/collective_checks.h"
#include "tests/libclient/transport/simulated_nodes.h"

namespace troika::transport {
namespace {

using conformance::Comms;
using conformance::ConnectGroup;

// (transport name, ranks)
class CollectivesTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    const auto& [name, ranks] = GetParam();
    auto transport = conformance::CreateTestTransport(name);
    ASSERT_TRUE(transport.ok()) << transport.status();
    // Every rank connects through this one object, as the memory transport requires.
    transport_ = *std::move(transport);
    comms_ = ConnectGroup(*transport_, store_, ranks, name + "/0/");
    ASSERT_EQ(comms_.size(), static_cast<size_t>(ranks));
  }

  std::unique_ptr<Transport> transport_;
  InMemoryStore store_;
  Comms comms_;
};

TEST_P(CollectivesTest, AllreduceMatchesReferenceForEveryDtypeOpAndSize) {
  conformance::CheckAllreduce(comms_);
}

TEST_P(CollectivesTest, AllreduceIntoSeparateOutputMatchesReferenceAndKeepsInput) {
  conformance::CheckAllreduceInto(comms_);
}

TEST_P(CollectivesTest, ReduceScatterMatchesReferenceForEveryDtypeOpAndBlockLayout) {
  conformance::CheckReduceScatter(comms_);
}

TEST_P(CollectivesTest, AllgathervConcatenatesInRankOrderInAndOutOfPlace) {
  conformance::CheckAllgatherv(comms_);
}

TEST_P(CollectivesTest, BroadcastCopiesRootBufferFromEveryRoot) {
  conformance::CheckBroadcast(comms_);
}

TEST_P(CollectivesTest, AlltoallvDeliversEveryBlockToItsRank) {
  conformance::CheckAlltoallv(comms_);
}

TEST_P(CollectivesTest, BarrierReleasesNoRankBeforeAllArrive) { conformance::CheckBarrier(comms_); }

TEST_P(CollectivesTest, InterleavedCollectivesStayInStep) {
  conformance::CheckInterleavedCollectives(comms_);
}

std::string Name(const ::testing::TestParamInfo<CollectivesTest::ParamType>& info) {
  return std::get<0>(info.param) + "_ranks_" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Gloo, CollectivesTest,
                         ::testing::Combine(::testing::Values("gloo"),
                                            ::testing::Values(1, 2, 3, 4, 8)),
                         Name);
INSTANTIATE_TEST_SUITE_P(Shm, CollectivesTest,
                         ::testing::Combine(::testing::Values("shm"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         Name);
INSTANTIATE_TEST_SUITE_P(Hierarchical, CollectivesTest,
                         ::testing::Combine(::testing::Values("hierarchical2", "hierarchical3",
                                                              "hierarchical2b"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         Name);
INSTANTIATE_TEST_SUITE_P(Auto, CollectivesTest,
                         ::testing::Combine(::testing::Values("auto", "auto2"),
                                            ::testing::Values(1, 4)),
                         Name);
INSTANTIATE_TEST_SUITE_P(Memory, CollectivesTest,
                         ::testing::Combine(::testing::Values("memory"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         Name);

}  // namespace
}  // namespace troika::transport
