// Deadlock detection end to end: ranks that block on tensors the others never submit are
// aborted at once with a message naming what each waits for; ordinary training is not.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

TEST(DeadlockTest, RanksWaitingForTensorsNoOneElseSubmitsAreAbortedNamingThem) {
  TestCluster cluster;
  auto contexts = cluster.Join("deadlock", 4);
  ASSERT_EQ(contexts.size(), 4u);
  std::vector<absl::Status> statuses(4);
  std::vector<absl::Duration> waited(4);
  OnEveryRank(4, [&](int rank) {
    float x = 1;
    const std::string name = rank == 3 ? "grad/b" : "grad/a";
    const absl::Time start = absl::Now();
    statuses[rank] = contexts[rank]->Allreduce(name, &x, &x, DataType::kFloat32, {1}).Wait();
    waited[rank] = absl::Now() - start;
  });
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_FALSE(statuses[r].ok());
    EXPECT_LT(waited[r], absl::Seconds(2));
    const std::string message(statuses[r].message());
    EXPECT_THAT(message, HasSubstr("deadlock"));
    EXPECT_THAT(message, HasSubstr("rank 3 waits for 'grad/b'"));
    EXPECT_THAT(message, HasSubstr("ranks 0-2 wait for 'grad/a'"));
  }
  for (auto& c : contexts) c->Shutdown().IgnoreError();
}

// Rank 0 joined; ranks 1 and 2 each wait for an allgather the other never submits (as unnamed
// ops do when one rank ran an unnamed op alone before): nobody can join again, so the job is
// aborted instead of hanging in the join.
TEST(DeadlockTest, ARankWaitingInAJoinForRanksBlockedElsewhereIsAborted) {
  TestCluster cluster;
  auto contexts = cluster.Join("deadlock-join", 3);
  ASSERT_EQ(contexts.size(), 3u);
  std::vector<absl::Status> statuses(3);
  std::vector<absl::Duration> waited(3);
  OnEveryRank(3, [&](int rank) {
    const absl::Time start = absl::Now();
    if (rank == 0) {
      statuses[rank] = contexts[rank]->Join().Wait();
    } else {
      float x = 1;
      statuses[rank] = contexts[rank]
                           ->Allgather(absl::StrCat("gather.", rank), &x, DataType::kFloat32, {1})
                           .Wait();
    }
    waited[rank] = absl::Now() - start;
  });
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_FALSE(statuses[r].ok());
    EXPECT_LT(waited[r], absl::Seconds(5));
    const std::string message(statuses[r].message());
    EXPECT_THAT(message, HasSubstr("deadlock: rank 0 waits for 'troika/join'"));
    EXPECT_THAT(message, HasSubstr("rank 2 waits for 'gather.2'"));
  }
  for (auto& c : contexts) c->Shutdown().IgnoreError();
}

TEST(DeadlockTest, TrainingWithSlowRanksIsNotMistakenForADeadlock) {
  TestCluster cluster;
  auto contexts = cluster.Join("training", 4);
  ASSERT_EQ(contexts.size(), 4u);
  constexpr int kSteps = 6;
  constexpr int kTensors = 8;
  std::vector<absl::Status> statuses(4);
  OnEveryRank(4, [&](int rank) {
    std::vector<std::vector<float>> grads(kTensors, std::vector<float>(1000, 1.0f));
    for (int step = 0; step < kSteps; ++step) {
      // Every other step one rank computes slowly: the others block on its tensors for
      // longer than the client's report threshold, yet it is not blocked, so no deadlock.
      if (step % 2 == 1 && rank == step % 4) {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
      }
      std::vector<Handle> handles;
      for (int t = 0; t < kTensors; ++t) {
        handles.push_back(contexts[rank]->Allreduce(absl::StrCat("grad/", t), grads[t].data(),
                                                    grads[t].data(), DataType::kFloat32, {1000},
                                                    {ReduceOp::kAverage}));
      }
      for (Handle& h : handles) {
        if (absl::Status s = h.Wait(); !s.ok() && statuses[rank].ok()) statuses[rank] = s;
      }
    }
  });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  for (auto& c : contexts) EXPECT_TRUE(c->Shutdown().ok());
}

// Polls `handles` round-robin, 1 ms apart, until all are done or `limit` passed; returns how
// long that took.
absl::Duration PollUntilDone(const std::vector<Handle>& handles, absl::Duration limit) {
  const absl::Time start = absl::Now();
  for (;;) {
    bool all_done = true;
    for (const Handle& h : handles) all_done &= h.Poll();
    if (all_done || absl::Now() - start > limit) return absl::Now() - start;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(DeadlockTest, RanksSpinningOnPollForTensorsThatCanNeverCompleteAreAborted) {
  TestCluster cluster;
  auto contexts = cluster.Join("poll-deadlock", 4);
  ASSERT_EQ(contexts.size(), 4u);
  std::vector<absl::Status> statuses(4);
  std::vector<absl::Duration> polled(4);
  OnEveryRank(4, [&](int rank) {
    // The ranks diverged: 0-2 submit grad/a first, rank 3 grad/b and grad/c; each polls what
    // it submitted (rank 3 both, in turn) before submitting the rest, never calling Wait.
    float x[3] = {1, 1, 1};
    std::vector<Handle> handles;
    if (rank == 3) {
      handles.push_back(contexts[rank]->Allreduce("grad/b", &x[1], &x[1], DataType::kFloat32, {1}));
      handles.push_back(contexts[rank]->Allreduce("grad/c", &x[2], &x[2], DataType::kFloat32, {1}));
    } else {
      handles.push_back(contexts[rank]->Allreduce("grad/a", &x[0], &x[0], DataType::kFloat32, {1}));
    }
    polled[rank] = PollUntilDone(handles, absl::Seconds(30));
    statuses[rank] = handles[0].Poll() ? handles[0].Wait() : absl::OkStatus();
  });
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_FALSE(statuses[r].ok());
    EXPECT_LT(polled[r], absl::Seconds(10));
    const std::string message(statuses[r].message());
    EXPECT_THAT(message, HasSubstr("deadlock"));
    // Rank 3's ops register one by one, each once its own polls spanned the threshold; the
    // job is aborted as soon as every rank is blocked, so with one or both.
    EXPECT_THAT(message, AnyOf(HasSubstr("rank 3 waits for 'grad/b'"),
                               HasSubstr("rank 3 waits for 'grad/c'")));
    EXPECT_THAT(message, HasSubstr("ranks 0-2 wait for 'grad/a'"));
  }
  for (auto& c : contexts) c->Shutdown().IgnoreError();
}

// Handle::Peek (a front end's check that a submission was not refused) is no poll: rank 0
// peeks at its op for 300 ms while rank 1 waits in a barrier rank 0 joins only afterwards;
// with Poll that would be a deadlock (the test above), with Peek it is rank 0 computing.
TEST(DeadlockTest, PeekingAtAnOpIsNotWaitingForIt) {
  TestCluster cluster;
  auto contexts = cluster.Join("peek", 2);
  ASSERT_EQ(contexts.size(), 2u);
  std::vector<absl::Status> statuses(2);
  OnEveryRank(2, [&](int rank) {
    float x = 1;
    Handle h;
    if (rank == 0) {
      h = contexts[rank]->Allreduce("peeked", &x, &x, DataType::kFloat32, {1});
      const absl::Time until = absl::Now() + absl::Milliseconds(300);
      while (absl::Now() < until) {
        if (h.Peek().has_value()) break;  // never: rank 1 submits it after the barrier
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (absl::Status s = contexts[rank]->Barrier().Wait(); !s.ok()) {
      statuses[rank] = s;
      return;
    }
    if (rank == 1) h = contexts[rank]->Allreduce("peeked", &x, &x, DataType::kFloat32, {1});
    statuses[rank] = h.Wait();
    if (statuses[rank].ok() && x != 2) statuses[rank] = absl::InternalError("wrong sum");
    if (statuses[rank].ok() && h.Peek() != absl::OkStatus()) {
      statuses[rank] = absl::InternalError("Peek of a finished op is not its outcome");
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  for (auto& c : contexts) c->Shutdown().IgnoreError();
}

TEST(DeadlockTest, ARankThatPolledOnceAndWentOffToComputeIsNotTakenForBlocked) {
  TestCluster cluster;
  auto contexts = cluster.Join("poll-compute", 4);
  ASSERT_EQ(contexts.size(), 4u);
  std::vector<absl::Status> statuses(4);
  OnEveryRank(4, [&](int rank) {
    float b = 1;
    float c = 1;
    Context& ctx = *contexts[rank];
    if (rank == 0) {
      // Submits grad/c, polls it once (not done: the others submit it after grad/b), then
      // computes for longer than any lease before submitting the grad/b the others wait for.
      Handle hc = ctx.Allreduce("grad/c", &c, &c, DataType::kFloat32, {1});
      EXPECT_FALSE(hc.Poll());
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      Handle hb = ctx.Allreduce("grad/b", &b, &b, DataType::kFloat32, {1});
      statuses[rank] = hb.Wait();
      if (absl::Status s = hc.Wait(); statuses[rank].ok()) statuses[rank] = s;
    } else {
      statuses[rank] = ctx.Allreduce("grad/b", &b, &b, DataType::kFloat32, {1}).Wait();
      if (statuses[rank].ok()) {
        statuses[rank] = ctx.Allreduce("grad/c", &c, &c, DataType::kFloat32, {1}).Wait();
      }
    }
    if (statuses[rank].ok()) {
      EXPECT_EQ(b, 4);
      EXPECT_EQ(c, 4);
    }
  });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  for (auto& c : contexts) EXPECT_TRUE(c->Shutdown().ok());
}

}  // namespace
}  // namespace troika::testing
