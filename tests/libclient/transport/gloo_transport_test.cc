#include "libclient/transport/gloo/gloo_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "libclient/transport/gloo/gloo_store.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "tests/libclient/transport/collective_checks.h"

// What only the Gloo transport does. Ranks are threads of this process connected over
// 127.0.0.1 through an InMemoryStore. The collective matrix runs over every transport in
// collectives_test.cc, and what every transport does in transport_conformance_test.cc.

namespace troika::transport {
namespace {

using conformance::Comms;
using conformance::ConnectGroup;

class GlooTransportTest : public ::testing::Test {
 protected:
  GlooTransport transport_;
  InMemoryStore store_;
};

// Gloo's rendezvous publishes a rank's addresses, then connects its pairs one peer at a
// time; through GlooMeshStore the publication returns only once every rank has published, so
// a rank whose generation ends while it waits for a missing peer (the store aborts the wait)
// has connected no pair that a peer could wait on (docs/testing.md, run 33).
TEST_F(GlooTransportTest, ARanksPublicationReturnsOnlyOnceEveryRankHasPublished) {
  GlooStore adapter(store_, absl::Seconds(30));
  GlooMeshStore mesh(adapter, /*rank=*/0, /*size=*/3);
  std::atomic<bool> returned{false};
  std::thread rank0([&] {
    mesh.set("data/2/rank_0", {'a'});
    returned = true;
  });
  ASSERT_TRUE(store_.Set("data/2/rank_2", "c").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(returned.load()) << "returned with rank 1's addresses missing";
  ASSERT_TRUE(store_.Set("data/2/rank_1", "b").ok());
  rank0.join();
  EXPECT_TRUE(returned.load());
  mesh.set("data/2/other", {'x'});  // any other key: set and returns
  EXPECT_TRUE(store_.Get("data/2/other", absl::Seconds(1)).ok());
}

TEST_F(GlooTransportTest, APublicationWhoseMeshNeverCompletesFailsWithTheStoresStatus) {
  GlooStore adapter(store_, absl::Milliseconds(200));
  GlooMeshStore mesh(adapter, /*rank=*/1, /*size=*/2);
  try {
    mesh.set("data/5/rank_1", {'b'});
    ADD_FAILURE() << "returned without rank 0's addresses";
  } catch (const GlooStoreError& e) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(e.status())) << e.status();
  }
}

TEST_F(GlooTransportTest, AbortOnEveryRankEndsCallsStuckOnADeadPeer) {
  Comms comms = ConnectGroup(transport_, store_, 2, "abort-all/");
  ASSERT_EQ(comms.size(), 2u);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    comms[0]->Abort();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comms[1]->Abort();  // What the job's failure handling does on every surviving rank.
  });
  const auto start = std::chrono::steady_clock::now();
  conformance::OnEveryRank(comms, [&](int r) {
    std::vector<float> data(16 << 20, 1.0f);
    const absl::Status status =
        comms[r]->Allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_FALSE(status.ok());
  });
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(GlooTransportTest, AbortUnblocksBlockedReduceScatter) {
  Comms comms = ConnectGroup(transport_, store_, 2, "abort-rs/");
  ASSERT_EQ(comms.size(), 2u);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    comms[0]->Abort();
  });
  std::vector<float> data(1 << 20, 1.0f);
  const std::vector<size_t> counts = {data.size() / 2, data.size() / 2};
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status =
      comms[0]->ReduceScatter(data.data(), counts, DataType::kFloat32, ReduceOp::kSum);
  aborter.join();
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(GlooTransportTest, BadArgumentsFailWithTheCollectiveAndRankAndKillTheCommunicator) {
  Comms comms = ConnectGroup(transport_, store_, 1, "bad-args/");
  ASSERT_EQ(comms.size(), 1u);
  char buffer[4] = {};
  const std::vector<size_t> two_ranks = {1, 1};
  absl::Status status = comms[0]->Allgatherv(buffer, buffer, two_ranks);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "gloo allgatherv failed (rank 0 of 1)"))
      << status;
  status = comms[0]->Barrier();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "recv_bytes")) << status;  // The cause.
}

}  // namespace
}  // namespace troika::transport
