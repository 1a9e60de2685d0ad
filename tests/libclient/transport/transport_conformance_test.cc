// What every transport does besides computing the right results (collectives_test.cc has
// those): aborting, timing out, refusing bad arguments and connecting. Ranks are threads of
// this process sharing one transport made by CreateTransport, connected through an
// InMemoryStore. What only one transport does is tested in its own file
// (gloo_transport_test.cc, shm_transport_test.cc, memory_transport_test.cc).

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "libclient/transport/transport.h"
#include "tests/libclient/transport/collective_checks.h"
#include "tests/libclient/transport/simulated_nodes.h"

namespace troika::transport {
namespace {

using Clock = std::chrono::steady_clock;
using conformance::Comms;

// One transport and the bounds its tests hold it to.
struct TransportCase {
  std::string name;  // For CreateTransport.
  // The abort test's communicator timeout, and how soon the peer of the aborted rank must fail.
  absl::Duration abort_timeout;
  absl::Duration abort_peer_bound;
  // The timeout of a call whose peer never makes it.
  absl::Duration lonely_timeout;
  // The code of a call made after a call failed: FAILED_PRECONDITION (the communicator is
  // unusable), or the first error's code where the group keeps that error (memory).
  absl::StatusCode after_error;
};

class TransportTest : public ::testing::TestWithParam<TransportCase> {
 protected:
  void SetUp() override {
    auto transport = conformance::CreateTestTransport(GetParam().name);
    ASSERT_TRUE(transport.ok()) << transport.status();
    // Every rank connects through this one object, as the memory transport requires.
    transport_ = *std::move(transport);
  }

  Comms Connect(int n, const std::string& prefix, absl::Duration timeout = absl::Seconds(20)) {
    return conformance::ConnectGroup(*transport_, store_, n, prefix, timeout);
  }

  absl::Status ConnectStatus(const CommunicatorSpec& spec) {
    return transport_->Connect(spec, store_).status();
  }

  std::unique_ptr<Transport> transport_;
  InMemoryStore store_;
};

// Transports whose ranks meet through the store, with a bounded timeout: not the memory
// transport, whose ranks meet in its one object.
class StoreRendezvousTest : public TransportTest {};

// Transports that compare the ranks' sizes of a collective: not Gloo.
class SizeCheckingTest : public TransportTest {};

// Rank 0 blocks in Allreduce while rank 1 never calls; Abort() on rank 0 from another thread
// ends the call promptly, and every later call on rank 0 fails fast. Rank 1's next call fails
// too, within the transport's bound.
TEST_P(TransportTest, AbortUnblocksBlockedCallAndFailsLaterCallsFast) {
  Comms comms = Connect(2, "abort/", GetParam().abort_timeout);
  ASSERT_EQ(comms.size(), 2u);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    comms[0]->Abort();
  });
  float x = 1;
  Clock::time_point start = Clock::now();
  absl::Status status = comms[0]->Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  const auto blocked = Clock::now() - start;
  aborter.join();
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_NE(status.message().find("rank 0 of 2"), std::string::npos) << status;
  EXPECT_GE(blocked, std::chrono::milliseconds(90));
  EXPECT_LT(blocked, std::chrono::seconds(5));

  comms[0]->Abort();  // Idempotent.
  start = Clock::now();
  EXPECT_FALSE(comms[0]->Barrier().ok());
  EXPECT_FALSE(comms[0]->Broadcast(&x, sizeof(x), 0).ok());
  EXPECT_FALSE(comms[0]->Allreduce(&x, 0, DataType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));

  start = Clock::now();
  status = comms[1]->Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("rank 1 of 2"), std::string::npos) << status;
  EXPECT_LT(Clock::now() - start, absl::ToChronoMilliseconds(GetParam().abort_peer_bound));
  EXPECT_FALSE(comms[1]->Barrier().ok());
}

TEST_P(TransportTest, AbortBeforeAnyCallFailsEveryCallFast) {
  Comms comms = Connect(2, "early-abort/");
  ASSERT_EQ(comms.size(), 2u);
  comms[1]->Abort();
  int32_t x = 0;
  EXPECT_TRUE(absl::IsCancelled(comms[1]->Allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum)));
  // Rank 0 learns of it instead of waiting for its timeout.
  const auto start = Clock::now();
  EXPECT_FALSE(comms[0]->Allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

// Rank 0 waits for a rank 1 that never comes.
TEST_P(TransportTest, LonelyCallTimesOutAndFailsThePeer) {
  const absl::Duration timeout = GetParam().lonely_timeout;
  Comms comms = Connect(2, "timeout/", timeout);
  ASSERT_EQ(comms.size(), 2u);
  const auto start = Clock::now();
  float x = 1;
  const absl::Status status = comms[0]->Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  const auto elapsed = Clock::now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_GE(elapsed, absl::ToChronoMilliseconds(timeout) * 9 / 10);
  EXPECT_LT(elapsed, absl::ToChronoMilliseconds(timeout) * 3 + std::chrono::seconds(2));
  EXPECT_FALSE(comms[0]->Barrier().ok());
  EXPECT_FALSE(comms[1]->Barrier().ok());  // The peer learns of it too, without waiting.
}

TEST_P(TransportTest, BroadcastRejectsRootOutsideTheGroupAndFailsLaterCalls) {
  Comms comms = Connect(1, "bad-root/");
  ASSERT_EQ(comms.size(), 1u);
  char byte = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(comms[0]->Broadcast(&byte, 1, 1)));
  EXPECT_EQ(comms[0]->Barrier().code(), GetParam().after_error);
}

TEST_P(TransportTest, ConnectRejectsRanksOutsideTheGroup) {
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectStatus({.rank = 1, .size = 1})));
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectStatus({.rank = -1, .size = 2})));
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectStatus({.rank = 2, .size = 2})));
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectStatus({.rank = 0, .size = 0})));
}

TEST_P(StoreRendezvousTest, ConnectRejectsAZeroTimeout) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      ConnectStatus({.rank = 0, .size = 1, .timeout = absl::ZeroDuration()})));
}

TEST_P(StoreRendezvousTest, ConnectTimesOutNamingTheRankWhenAPeerNeverComes) {
  const absl::Status status = ConnectStatus(
      {.rank = 0, .size = 2, .store_prefix = "alone/", .timeout = absl::Milliseconds(300)});
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "rank 0 of 2")) << status;
}

TEST_P(StoreRendezvousTest, ConnectWritesOnlyUnderTheStorePrefix) {
  Comms comms = Connect(3, "jobs/7/comm/2/");
  ASSERT_EQ(comms.size(), 3u);
  ASSERT_GT(store_.size(), 0u);
  for (const std::string& key : store_.Keys()) {
    EXPECT_TRUE(absl::StartsWith(key, "jobs/7/comm/2/")) << key;
  }
}

TEST_P(SizeCheckingTest, MismatchedAlltoallvSizesFailEveryRank) {
  Comms comms = Connect(2, "a2a/");
  ASSERT_EQ(comms.size(), 2u);
  conformance::OnEveryRank(comms, [&](int r) {
    std::vector<char> in(8), out(8);
    const std::vector<size_t> send = {1, 2};
    const std::vector<size_t> recv = {1, r == 1 ? size_t{3} : size_t{2}};  // Rank 1: 3 from 1.
    const absl::Status status = comms[r]->Alltoallv(in.data(), send, out.data(), recv);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), absl::StrCat("rank ", r, " of 2"))) << status;
    EXPECT_FALSE(comms[r]->Barrier().ok());
  });
}

TEST(CreateTransportTest, KnowsEveryTransportAndNamesTheChoicesOtherwise) {
  for (const char* name : {"auto", "gloo", "shm", "hierarchical", "memory"}) {
    EXPECT_TRUE(CreateTransport(name).ok()) << name;
  }
  const absl::Status status = CreateTransport("nccl").status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("auto, gloo, shm, hierarchical, memory"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("'nccl'"), std::string::npos) << status;
}

// Rank 1 of Gloo usually fails at once when its connection to an aborted rank 0 breaks, but
// Gloo does not fail a send it had already queued on that connection, which then waits for
// the timeout: hence its short abort timeout and longer peer bound.
const TransportCase kGloo{.name = "gloo",
                          .abort_timeout = absl::Seconds(2),
                          .abort_peer_bound = absl::Seconds(5),
                          .lonely_timeout = absl::Milliseconds(500),
                          .after_error = absl::StatusCode::kFailedPrecondition};
const TransportCase kShm{.name = "shm",
                         .abort_timeout = absl::Seconds(20),
                         .abort_peer_bound = absl::Seconds(1),
                         .lonely_timeout = absl::Milliseconds(300),
                         .after_error = absl::StatusCode::kFailedPrecondition};
// Two ranks on two simulated nodes: the node leaders' Gloo carries every collective, so it is
// held to Gloo's bounds. "auto2" chooses Gloo there (one rank per node).
const TransportCase kHierarchical{.name = "hierarchical2",
                                  .abort_timeout = absl::Seconds(2),
                                  .abort_peer_bound = absl::Seconds(5),
                                  .lonely_timeout = absl::Milliseconds(500),
                                  .after_error = absl::StatusCode::kFailedPrecondition};
// One node: "auto" chooses shared memory.
const TransportCase kAuto{.name = "auto",
                          .abort_timeout = absl::Seconds(20),
                          .abort_peer_bound = absl::Seconds(1),
                          .lonely_timeout = absl::Milliseconds(300),
                          .after_error = absl::StatusCode::kFailedPrecondition};
const TransportCase kMemory{.name = "memory",
                            .abort_timeout = absl::Seconds(20),
                            .abort_peer_bound = absl::Seconds(1),
                            .lonely_timeout = absl::Milliseconds(300),
                            .after_error = absl::StatusCode::kInvalidArgument};

std::string Name(const ::testing::TestParamInfo<TransportCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest,
                         ::testing::Values(kGloo, kShm, kHierarchical, kAuto, kMemory), Name);
INSTANTIATE_TEST_SUITE_P(Transports, StoreRendezvousTest,
                         ::testing::Values(kGloo, kShm, kHierarchical, kAuto), Name);
INSTANTIATE_TEST_SUITE_P(Transports, SizeCheckingTest, ::testing::Values(kShm, kAuto, kMemory),
                         Name);

}  // namespace
}  // namespace troika::transport
