// What only the shared-memory transport does: its ranks as forked processes (the real
// cross-process path; the thread matrix runs in collectives_test.cc, and what every transport
// does in transport_conformance_test.cc), abort and death of a peer, and cleanup of /dev/shm.

#include "libclient/transport/shm/shm_transport.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "libclient/transport/memory/in_memory_store.h"
#include "tests/libclient/transport/collective_checks.h"
#include "tests/libclient/transport/file_store.h"
#include "tests/libclient/transport/process_group.h"

namespace troika::transport {
namespace {

using Clock = std::chrono::steady_clock;
using conformance::Comms;
using conformance::ConnectGroup;
using conformance::MakeTempDir;
using conformance::ProcessGroup;
using conformance::SegmentsOf;

class ShmProcessCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmProcessCollectivesTest, EveryCollectiveMatchesReferenceAcrossProcesses) {
  const int n = GetParam();
  ProcessGroup group(n, [n](Communicator& comm) {
    conformance::CheckAllreduceOnRank(comm, conformance::AllreduceExpected(n));
    conformance::CheckReduceScatterOnRank(comm, conformance::ReduceScatterExpected(n));
    conformance::CheckAllgathervOnRank(comm);
    conformance::CheckBroadcastOnRank(comm);
    conformance::CheckAlltoallvOnRank(comm);
    conformance::CheckInterleavedCollectivesOnRank(comm);
  });
  const std::vector<int> codes = group.WaitAll();
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_TRUE(SegmentsOf(group.pids()[0]).empty());
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmProcessCollectivesTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "ranks_" + std::to_string(info.param); });

TEST(ShmProcessTest, KilledRankFailsEverySurvivorWithinFiveSecondsAndLeavesNoSegment) {
  const int n = 4;
  const int victim = 2;
  const std::string ready = MakeTempDir() + "/ready.";
  ProcessGroup group(n, [&](Communicator& comm) {
    std::vector<float> data(4 << 20, 1.0f);  // 16 MiB: the kill lands mid-allreduce
    absl::Status status;
    for (int round = 0; status.ok(); ++round) {
      status = comm.Allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
      if (round == 0 && status.ok()) std::ofstream(absl::StrCat(ready, comm.rank()));
    }
    EXPECT_TRUE(absl::IsUnavailable(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "rank 2 (pid")) << status;
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int r = 0; r < n; ++r) {
    while (access(absl::StrCat(ready, r).c_str(), F_OK) != 0 && absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // Connected and running: the name is already gone.
  EXPECT_TRUE(SegmentsOf(group.pids()[0]).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(group.pids()[victim], SIGKILL), 0);
  EXPECT_EQ(group.Wait(victim), 128 + SIGKILL);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(group.Wait(r, absl::Seconds(10)), 0) << "rank " << r;
    EXPECT_LT(Clock::now() - killed_at, std::chrono::seconds(5)) << "rank " << r;
  }
  EXPECT_TRUE(SegmentsOf(group.pids()[0]).empty());
}

TEST(ShmProcessTest, AbortInOneProcessWakesAPeerBlockedInAnother) {
  ProcessGroup group(2, [](Communicator& comm) {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.Abort();
      return;
    }
    const auto start = Clock::now();
    float x = 1;
    const absl::Status status = comm.Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_TRUE(absl::IsCancelled(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "Abort() was called on rank 1")) << status;
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "not woken";
  });
  EXPECT_EQ(group.WaitAll(), std::vector<int>({0, 0}));
}

class ShmTransportTest : public ::testing::Test {
 protected:
  ShmTransport transport_;
  InMemoryStore store_;
};

TEST_F(ShmTransportTest, AbortOnOneRankWakesEveryWaitingRank) {
  Comms comms = ConnectGroup(transport_, store_, 4, "abort-all/");
  ASSERT_EQ(comms.size(), 4u);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    comms[3]->Abort();
  });
  const auto start = Clock::now();
  std::vector<std::thread> waiters;
  for (int r = 0; r < 3; ++r) {
    waiters.emplace_back([&, r] {
      const absl::Status status = comms[r]->Barrier();
      EXPECT_TRUE(absl::IsCancelled(status)) << status;
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "not woken";
    });
  }
  for (std::thread& t : waiters) t.join();
  aborter.join();
}

TEST_F(ShmTransportTest, LonelyCallTimesOutNamingTheMissingRank) {
  const absl::Duration timeout = absl::Milliseconds(300);
  Comms comms = ConnectGroup(transport_, store_, 2, "timeout/", timeout);
  ASSERT_EQ(comms.size(), 2u);
  float x = 1;
  const absl::Status status = comms[0]->Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(absl::StrContains(status.message(), "rank 1 did not reach")) << status;
}

TEST_F(ShmTransportTest, HundredCommunicatorsInARowLeaveNothingInDevShm) {
  for (int i = 0; i < 100; ++i) {
    Comms comms = ConnectGroup(transport_, store_, 2, absl::StrCat("many/", i, "/"));
    ASSERT_EQ(comms.size(), 2u);
    EXPECT_TRUE(SegmentsOf(getpid()).empty()) << "unlinked once every rank mapped it";
    conformance::OnEveryRank(comms, [&](int r) {
      int64_t v = r + 1;
      ASSERT_TRUE(comms[r]->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).ok());
      EXPECT_EQ(v, 3);
    });
  }
  EXPECT_TRUE(SegmentsOf(getpid()).empty());
}

TEST_F(ShmTransportTest, RankZeroCreatesNothingUntilEveryRankWaits) {
  const auto status = transport_.Connect(
      {.rank = 0, .size = 2, .store_prefix = "alone/", .timeout = absl::Milliseconds(300)}, store_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "alone/shm/ready/1")) << status.status();
  EXPECT_TRUE(store_.Keys().empty()) << "no segment was published";
}

TEST_F(ShmTransportTest, ConnectFailingAfterTheSegmentExistsLeavesNothingInDevShm) {
  // Rank 1 says it waits, then never maps the segment.
  ASSERT_TRUE(store_.Set("lost/shm/ready/1", "1").ok());
  const auto status = transport_.Connect(
      {.rank = 0, .size = 2, .store_prefix = "lost/", .timeout = absl::Milliseconds(300)}, store_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "lost/shm/mapped/1")) << status.status();
  EXPECT_TRUE(store_.Get("lost/shm/segment", absl::ZeroDuration()).ok());
  EXPECT_TRUE(SegmentsOf(getpid()).empty());
}

TEST_F(ShmTransportTest, ConnectTimesOutWhenRankZeroNeverPublishes) {
  const auto status = transport_.Connect(
      {.rank = 1, .size = 2, .store_prefix = "no-zero/", .timeout = absl::Milliseconds(200)},
      store_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
}

TEST_F(ShmTransportTest, RankThatCannotOpenTheSegmentSaysEveryRankMustShareAHost) {
  // What a rank on another host sees: a published name that does not exist here.
  ASSERT_TRUE(store_.Set("remote/shm/segment", "/troika-shm-1-00000000deadbeef otherhost").ok());
  const auto status = transport_.Connect({.rank = 1, .size = 2, .store_prefix = "remote/"}, store_);
  EXPECT_TRUE(absl::IsFailedPrecondition(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "every rank on one host"))
      << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "otherhost")) << status.status();
}

TEST_F(ShmTransportTest, RankZeroFailingToCreateTheSegmentFailsTheOthersAtOnce) {
  // What rank 0 publishes when /dev/shm has no room (checked by hand with a 4 MiB tmpfs).
  ASSERT_TRUE(store_.Set("full/shm/segment", "! allocating 16780032 bytes: no space").ok());
  const auto status = transport_.Connect({.rank = 1, .size = 2, .store_prefix = "full/"}, store_);
  EXPECT_TRUE(absl::IsUnavailable(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(),
                                "rank 0 could not create the shared memory: allocating"))
      << status.status();
}

}  // namespace
}  // namespace troika::transport
