#include "libclient/transport/gloo/gloo_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "tests/libclient/transport/collective_checks.h"

// Ranks are threads of this process connected over 127.0.0.1 through an InMemoryStore. The
// collective matrix runs over every transport in collectives_test.cc.

namespace troika::transport {
namespace {

using conformance::Comms;
using conformance::ConnectGroup;

class GlooTransportTest : public ::testing::Test {
 protected:
  GlooTransport transport_;
  InMemoryStore store_;
};

TEST_F(GlooTransportTest, AbortUnblocksBlockedCallAndFailsLaterCallsFast) {
  // Rank 1 usually fails at once, when its connection to rank 0 breaks; but Gloo does not
  // fail a send it had already queued on that connection, which then waits for the timeout.
  const absl::Duration timeout = absl::Seconds(2);
  Comms comms = ConnectGroup(transport_, store_, 2, "abort/", timeout);
  ASSERT_EQ(comms.size(), 2u);
  conformance::CheckAbortUnblocksBlockedCall(comms, timeout + absl::Seconds(3));
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

TEST_F(GlooTransportTest, LonelyCallTimesOutAndFailsThePeer) {
  const absl::Duration timeout = absl::Milliseconds(500);
  Comms comms = ConnectGroup(transport_, store_, 2, "timeout/", timeout);
  ASSERT_EQ(comms.size(), 2u);
  conformance::CheckLonelyCallTimesOut(comms, timeout);
}

TEST_F(GlooTransportTest, ConnectTimesOutWhenAPeerNeverPublishesItsAddress) {
  const auto status = transport_.Connect(
      {.rank = 0, .size = 2, .store_prefix = "alone/", .timeout = absl::Milliseconds(300)}, store_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "rank 0 of 2")) << status.status();
}

TEST_F(GlooTransportTest, ConnectRejectsInvalidSpecs) {
  EXPECT_TRUE(absl::IsInvalidArgument(transport_.Connect({.rank = 1, .size = 1}, store_).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(transport_.Connect({.rank = -1, .size = 2}, store_).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      transport_.Connect({.rank = 0, .size = 1, .timeout = absl::ZeroDuration()}, store_)
          .status()));
}

TEST_F(GlooTransportTest, ConnectWritesOnlyUnderTheStorePrefix) {
  Comms comms = ConnectGroup(transport_, store_, 3, "jobs/7/comm/2/");
  ASSERT_EQ(comms.size(), 3u);
  ASSERT_GT(store_.size(), 0u);
  for (const std::string& key : store_.Keys()) {
    EXPECT_TRUE(absl::StartsWith(key, "jobs/7/comm/2/")) << key;
  }
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

TEST_F(GlooTransportTest, BroadcastRejectsRootOutsideTheGroup) {
  Comms comms = ConnectGroup(transport_, store_, 1, "bad-root/");
  ASSERT_EQ(comms.size(), 1u);
  char byte = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(comms[0]->Broadcast(&byte, 1, 1)));
}

TEST_F(GlooTransportTest, AbortBeforeAnyCallFailsEveryCallFast) {
  Comms comms = ConnectGroup(transport_, store_, 2, "early-abort/");
  ASSERT_EQ(comms.size(), 2u);
  comms[1]->Abort();
  int32_t x = 0;
  EXPECT_TRUE(absl::IsCancelled(comms[1]->Allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum)));
  // Rank 0's connection was closed under it: it fails instead of waiting for its timeout.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(comms[0]->Allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace troika::transport
