// What only the shared-memory transport does: its ranks as forked processes (the real
// cross-process path; the thread matrix runs in collectives_test.cc, and what every transport
// does in transport_conformance_test.cc), abort and death of a peer, and what a process holds of a
// segment afterwards.

#include "libclient/transport/shm/shm_transport.h"

#include <dirent.h>
#include <fcntl.h>
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
#include "libclient/transport/shm/shm_segment.h"
#include "tests/libclient/transport/collective_checks.h"
#include "tests/libclient/transport/file_store.h"
#include "tests/libclient/transport/process_group.h"

namespace troika::transport {
namespace {

using Clock = std::chrono::steady_clock;
using conformance::Comms;
using conformance::ConnectGroup;
using conformance::MakeTempDir;
using conformance::NamedSegments;
using conformance::ProcessGroup;
using conformance::SegmentDescriptorsOf;
using conformance::SegmentMappingsOf;

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
  EXPECT_TRUE(NamedSegments().empty());
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
  // Connected and running: rank 0 maps the segment, and has closed the descriptor the others
  // opened it by.
  EXPECT_FALSE(SegmentMappingsOf(group.pids()[0]).empty());
  EXPECT_TRUE(SegmentDescriptorsOf(group.pids()[0]).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(group.pids()[victim], SIGKILL), 0);
  EXPECT_EQ(group.Wait(victim), 128 + SIGKILL);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(group.Wait(r, absl::Seconds(10)), 0) << "rank " << r;
    EXPECT_LT(Clock::now() - killed_at, std::chrono::seconds(5)) << "rank " << r;
  }
  EXPECT_TRUE(NamedSegments().empty());
}

TEST(ShmProcessTest, RankZeroKilledBeforeTheOthersMapTheSegmentLeavesNothingBehind) {
  // The window in which a named segment would leak: rank 0 has created and published it, and
  // is killed before the other rank maps it.
  const std::string dir = MakeTempDir();
  const pid_t rank0 = fork();
  if (rank0 == 0) {
    FileStore store(dir);
    (void)ShmTransport().Connect({.rank = 0, .size = 2, .store_prefix = "k/"}, store);
    _exit(0);
  }
  FileStore store(dir);
  ASSERT_TRUE(store.Set("k/shm/ready/1", "1").ok());
  const absl::StatusOr<std::string> locator = store.Get("k/shm/segment", absl::Seconds(60));
  ASSERT_TRUE(locator.ok()) << locator.status();
  EXPECT_FALSE(SegmentDescriptorsOf(rank0).empty()) << "rank 0 holds the segment for rank 1";
  ASSERT_EQ(kill(rank0, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(rank0, &status, 0), rank0);
  EXPECT_TRUE(NamedSegments().empty());
  // The segment went with its only holder: rank 1 fails at once, saying why.
  const auto comm = ShmTransport().Connect({.rank = 1, .size = 2, .store_prefix = "k/"}, store);
  EXPECT_TRUE(absl::IsFailedPrecondition(comm.status())) << comm.status();
  EXPECT_TRUE(absl::StrContains(comm.status().message(), "rank 0 failed meanwhile"))
      << comm.status();
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

TEST_F(ShmTransportTest, HundredCommunicatorsInARowLeaveNoDescriptorAndNoMapping) {
  for (int i = 0; i < 100; ++i) {
    Comms comms = ConnectGroup(transport_, store_, 2, absl::StrCat("many/", i, "/"));
    ASSERT_EQ(comms.size(), 2u);
    EXPECT_TRUE(SegmentDescriptorsOf(getpid()).empty()) << "closed once every rank mapped it";
    EXPECT_EQ(SegmentMappingsOf(getpid()).size(), 2u) << "one mapping per rank";
    conformance::OnEveryRank(comms, [&](int r) {
      int64_t v = r + 1;
      ASSERT_TRUE(comms[r]->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).ok());
      EXPECT_EQ(v, 3);
    });
  }
  EXPECT_TRUE(SegmentMappingsOf(getpid()).empty());
  EXPECT_TRUE(NamedSegments().empty());
}

TEST_F(ShmTransportTest, RankZeroCreatesNothingUntilEveryRankWaits) {
  const auto status = transport_.Connect(
      {.rank = 0, .size = 2, .store_prefix = "alone/", .timeout = absl::Milliseconds(300)}, store_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "alone/shm/ready/1")) << status.status();
  EXPECT_TRUE(store_.Keys().empty()) << "no segment was published";
}

TEST_F(ShmTransportTest, ConnectFailingAfterTheSegmentExistsLeavesNoDescriptorAndNoMapping) {
  // Rank 1 says it waits, then never maps the segment.
  ASSERT_TRUE(store_.Set("lost/shm/ready/1", "1").ok());
  const auto status = transport_.Connect(
      {.rank = 0, .size = 2, .store_prefix = "lost/", .timeout = absl::Milliseconds(300)}, store_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "lost/shm/mapped/1")) << status.status();
  EXPECT_TRUE(store_.Get("lost/shm/segment", absl::ZeroDuration()).ok());
  EXPECT_TRUE(SegmentDescriptorsOf(getpid()).empty());
  EXPECT_TRUE(SegmentMappingsOf(getpid()).empty());
}

TEST_F(ShmTransportTest, ConnectTimesOutWhenRankZeroNeverPublishes) {
  const auto status = transport_.Connect(
      {.rank = 1, .size = 2, .store_prefix = "no-zero/", .timeout = absl::Milliseconds(200)},
      store_);
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status())) << status.status();
}

TEST_F(ShmTransportTest, RankThatCannotOpenTheSegmentSaysEveryRankMustShareAHost) {
  // What a rank on another host sees: a locator whose pid and descriptor, here, are some other
  // file of some other process (here: /dev/null in this one), which it must not open.
  const int null_fd = open("/dev/null", O_RDONLY);
  ASSERT_GE(null_fd, 0);
  ASSERT_TRUE(store_
                  .Set("remote/shm/segment",
                       absl::StrCat(getpid(), " ", null_fd, " 00000000deadbeef otherhost"))
                  .ok());
  const auto status = transport_.Connect({.rank = 1, .size = 2, .store_prefix = "remote/"}, store_);
  close(null_fd);
  EXPECT_TRUE(absl::IsFailedPrecondition(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "every rank on one host"))
      << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(), "otherhost")) << status.status();
}

TEST(ShmSegmentTest, OpensOnlyByTheCreatorsDescriptorNonceAndGroupSize) {
  using shm_internal::ShmSegment;
  absl::StatusOr<std::unique_ptr<ShmSegment>> created = ShmSegment::Create(2);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string locator = (*created)->locator();
  EXPECT_TRUE(ShmSegment::Open(locator, 2).ok());
  const std::string wrong_nonce =
      absl::StrCat(locator.substr(0, locator.size() - 1), locator.back() == '0' ? "1" : "0");
  EXPECT_TRUE(absl::IsFailedPrecondition(ShmSegment::Open(wrong_nonce, 2).status()));
  const auto wrong_size = ShmSegment::Open(locator, 3).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(wrong_size)) << wrong_size;
  EXPECT_TRUE(absl::StrContains(wrong_size.message(), "agree on the group size")) << wrong_size;
  EXPECT_TRUE(absl::IsInvalidArgument(ShmSegment::Open("/troika-shm-1-deadbeef", 2).status()));
  (*created)->CloseDescriptor();
  EXPECT_TRUE(absl::IsNotFound(ShmSegment::Open(locator, 2).status()));
  EXPECT_TRUE(SegmentDescriptorsOf(getpid()).empty());
}

TEST_F(ShmTransportTest, RankZeroFailingToCreateTheSegmentFailsTheOthersAtOnce) {
  // What rank 0 publishes when the memory cannot be allocated.
  ASSERT_TRUE(store_.Set("full/shm/segment", "! allocating 16780032 bytes: no space").ok());
  const auto status = transport_.Connect({.rank = 1, .size = 2, .store_prefix = "full/"}, store_);
  EXPECT_TRUE(absl::IsUnavailable(status.status())) << status.status();
  EXPECT_TRUE(absl::StrContains(status.status().message(),
                                "rank 0 could not create the shared memory: allocating"))
      << status.status();
}

}  // namespace
}  // namespace troika::transport
