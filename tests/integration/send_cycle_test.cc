// The send cycle (docs/protocol.md, Negotiation rules, Cycle time): a rank holds its requests
// up to the job's cycle time after the first, so that requests submitted close together leave
// in one message; a wait or poll sends what is held at once; a request nobody waits for
// leaves when the cycle ends.

#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/request_counter.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

constexpr int kRanks = 2;

coordinator::NegotiatorOptions WithCycle(absl::Duration cycle) {
  coordinator::NegotiatorOptions options;
  options.cycle_time = cycle;
  return options;
}

// One allreduce on every rank, done: after it the ranks hold the job's settings (sent when
// their sessions opened). Its request is sent by one poll and its end awaited by a callback no
// thread waits in, not by a Wait: a Wait blocked over 50 ms queues wait states, and a sender
// woken to send them takes along whatever requests are held by then — later ones, of the test.
void WarmUp(std::vector<std::unique_ptr<Context>>& contexts) {
  OnEveryRank(kRanks, [&](int rank) {
    float x = 1;
    absl::Notification done;
    absl::Status status;
    Handle h = contexts[rank]->Allreduce("warm-up", &x, &x, DataType::kFloat32, {1});
    h.OnDone(
        [&](const absl::Status& s) {
          status = s;
          done.Notify();
        },
        /*caller_waits=*/false);
    h.Poll();  // sends what is held at once
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60))) << "rank " << rank;
    ASSERT_TRUE(status.ok()) << status;
  });
}

// Counted: the messages that carry requests (RequestCounter), not the wait states a rank
// blocked over 50 ms sends on a slow machine.
TEST(SendCycleTest, RequestsSubmittedWithinACycleLeaveInOneMessage) {
  // A cycle no submission outlasts, however slow the machine: the first Wait sends them.
  TestCluster cluster(WithCycle(absl::Seconds(120)));
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  WarmUp(contexts);
  constexpr int kTensors = 20;
  std::vector<int64_t> before(kRanks);
  for (int r = 0; r < kRanks; ++r) before[r] = sent.Of(r);
  OnEveryRank(kRanks, [&](int rank) {
    std::vector<float> data(kTensors, static_cast<float>(rank + 1));
    std::vector<Handle> handles;
    for (int t = 0; t < kTensors; ++t) {  // as gradients come out of a backward pass
      handles.push_back(contexts[rank]->Allreduce(absl::StrCat("grad/", t), &data[t], &data[t],
                                                  DataType::kFloat32, {1}));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (int t = 0; t < kTensors; ++t) {
      ASSERT_TRUE(handles[t].Wait().ok());
      EXPECT_EQ(data[t], 3.0f);
    }
  });
  // One batch per rank, sent by its first Wait; without the cycle, a message per request.
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(sent.Of(r) - before[r], 1)
        << "rank " << r << ": messages for " << kTensors << " requests";
  }
}

// What else wakes the sender does not send the requests held for the cycle: here the wait
// state of a rank no longer blocked (its callback wait on "slow" ended) leaves ahead of the
// 20 requests it submitted meanwhile, which leave later in one message, at its first Wait.
// (Before, they left with it, and the Wait found nothing held: two messages, as
// RequestsSubmittedWithinACycleLeaveInOneMessage once counted under load, where something
// else, a report or a wait state, woke the sender while the ranks submitted.)
TEST(SendCycleTest, AnEndedWaitLeavesAheadOfTheRequestsHeldMeanwhile) {
  TestCluster cluster(WithCycle(absl::Seconds(120)));
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  WarmUp(contexts);
  const int64_t blocked_before = sent.WaitStatesOf(0, /*blocked=*/true);
  const int64_t unblocked_before = sent.WaitStatesOf(0, /*blocked=*/false);
  float slow = 1;
  absl::Notification slow_done;
  Handle slow_handle = contexts[0]->Allreduce("slow", &slow, &slow, DataType::kFloat32, {1});
  // A framework's callback wait (caller_waits): "slow" leaves at once; rank 0 counts as
  // blocked on it after 50 ms, which its sender reports (rank 1 has not submitted it).
  slow_handle.OnDone(
      [&](const absl::Status& s) {
        EXPECT_TRUE(s.ok()) << s;
        slow_done.Notify();
      },
      /*caller_waits=*/true);
  ASSERT_TRUE(sent.WaitForWaitStates(0, /*blocked=*/true, blocked_before, absl::Seconds(60)));
  constexpr int kTensors = 20;
  std::vector<float> data0(kTensors, 1.0f);
  std::vector<Handle> handles0;
  for (int t = 0; t < kTensors; ++t) {
    handles0.push_back(contexts[0]->Allreduce(absl::StrCat("grad/", t), &data0[t], &data0[t],
                                              DataType::kFloat32, {1}));
  }
  const int64_t requests_before = sent.Of(0);
  float slow1 = 2;
  ASSERT_TRUE(contexts[1]->Allreduce("slow", &slow1, &slow1, DataType::kFloat32, {1}).Wait().ok());
  ASSERT_TRUE(slow_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // Rank 0 is no longer blocked: its sender says so, and holds the 20 requests.
  ASSERT_TRUE(sent.WaitForWaitStates(0, /*blocked=*/false, unblocked_before, absl::Seconds(60)));
  EXPECT_EQ(sent.Of(0), requests_before) << "the held requests left with the wait state";
  OnEveryRank(kRanks, [&](int rank) {
    std::vector<float> data1(kTensors, 2.0f);
    std::vector<Handle> handles1;
    if (rank == 1) {
      for (int t = 0; t < kTensors; ++t) {
        handles1.push_back(contexts[1]->Allreduce(absl::StrCat("grad/", t), &data1[t], &data1[t],
                                                  DataType::kFloat32, {1}));
      }
    }
    std::vector<Handle>& handles = rank == 0 ? handles0 : handles1;
    std::vector<float>& data = rank == 0 ? data0 : data1;
    for (int t = 0; t < kTensors; ++t) {
      ASSERT_TRUE(handles[t].Wait().ok());
      EXPECT_EQ(data[t], 3.0f);
    }
  });
  EXPECT_EQ(sent.Of(0) - requests_before, 1) << "rank 0's 20 requests: one message";
  EXPECT_EQ(slow, 3.0f);
}

TEST(SendCycleTest, AWaitOrAPollSendsHeldRequestsAtOnce) {
  TestCluster cluster(WithCycle(absl::Seconds(300)));
  auto contexts = cluster.Join("job", kRanks);
  WarmUp(contexts);
  const absl::Time start = absl::Now();
  OnEveryRank(kRanks, [&](int rank) {
    float x = static_cast<float>(rank);
    Handle h = contexts[rank]->Allreduce("waited", &x, &x, DataType::kFloat32, {1});
    if (rank == 0) {
      ASSERT_TRUE(h.Wait().ok());
    } else {
      while (!h.Poll()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(x, 1.0f);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(120)) << "held for the 300 s cycle";
}

TEST(SendCycleTest, ARequestNobodyWaitsForLeavesWhenTheCycleEnds) {
  TestCluster cluster(WithCycle(absl::Milliseconds(100)));
  auto contexts = cluster.Join("job", kRanks);
  WarmUp(contexts);
  absl::Notification rank0_done;
  OnEveryRank(kRanks, [&](int rank) {
    float x = 1;
    Handle h = contexts[rank]->Allreduce("async", &x, &x, DataType::kFloat32, {1});
    if (rank == 0) {
      ASSERT_TRUE(h.Wait().ok());
      rank0_done.Notify();
    } else {
      // Computes without looking at its handle until rank 0 has its result (or a not-hung
      // bound passed): its request must leave on its own, when the cycle ends.
      EXPECT_TRUE(rank0_done.WaitForNotificationWithTimeout(absl::Seconds(60)))
          << "rank 1's request waited for its Wait";
      ASSERT_TRUE(h.Wait().ok());
    }
    EXPECT_EQ(x, 2.0f);
  });
}

TEST(SendCycleTest, CycleTimeZeroSendsEachRequestAtOnce) {
  TestCluster cluster(WithCycle(absl::ZeroDuration()));
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  WarmUp(contexts);
  OnEveryRank(kRanks, [&](int rank) {
    const int64_t before = sent.Of(rank);
    std::vector<float> data(5, 1.0f);
    std::vector<Handle> handles;
    for (int t = 0; t < 5; ++t) {
      handles.push_back(contexts[rank]->Allreduce(absl::StrCat("grad/", t), &data[t], &data[t],
                                                  DataType::kFloat32, {1}));
      // Nothing waits or polls: the sender sends each on its own, before the next comes.
      ASSERT_TRUE(sent.WaitForMoreThan(rank, before + t, absl::Seconds(60)))
          << "rank " << rank << ": grad/" << t << " was held";
    }
    for (Handle& h : handles) ASSERT_TRUE(h.Wait().ok());
    EXPECT_EQ(sent.Of(rank) - before, 5) << "rank " << rank;
  });
}

}  // namespace
}  // namespace troika::testing
