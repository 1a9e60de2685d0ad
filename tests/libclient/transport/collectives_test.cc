// The collective conformance checks (collective_checks.h) over every CPU transport, its ranks
// as threads of this process: Gloo over 127.0.0.1, shared memory, and the in-memory fake.
// Each transport connects through an InMemoryStore.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/transport.h"
#include "tests/libclient/transport/collective_checks.h"

namespace troika::transport {
namespace {

using conformance::Comms;
using conformance::ConnectGroup;

// (transport name, ranks)
class CollectivesTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    const auto& [name, ranks] = GetParam();
    auto transport = CreateTransport(name);
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
INSTANTIATE_TEST_SUITE_P(Memory, CollectivesTest,
                         ::testing::Combine(::testing::Values("memory"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         Name);

}  // namespace
}  // namespace troika::transport
