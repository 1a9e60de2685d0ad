// The send cycle (docs/protocol.md, Negotiation rules, Cycle time): a rank holds its requests
// up to the job's cycle time after the first, so that requests submitted close together leave
// in one message; a wait or poll sends what is held at once; a request nobody waits for
// leaves when the cycle ends.

#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

constexpr int kRanks = 2;

coordinator::NegotiatorOptions WithCycle(absl::Duration cycle) {
  coordinator::NegotiatorOptions options;
  options.cycle_time = cycle;
  return options;
}

// One allreduce on every rank, waited: after it the ranks hold the job's settings (sent
// when their sessions opened).
void WarmUp(std::vector<std::unique_ptr<Context>>& contexts) {
  OnEveryRank(kRanks, [&](int rank) {
    float x = 1;
    ASSERT_TRUE(contexts[rank]->Allreduce("warm-up", &x, &x, DataType::kFloat32, {1}).Wait().ok());
  });
}

TEST(SendCycleTest, RequestsSubmittedWithinACycleLeaveInOneMessage) {
  TestCluster cluster(WithCycle(absl::Seconds(2)));
  auto contexts = cluster.Join("job", kRanks);
  WarmUp(contexts);
  constexpr int kTensors = 20;
  const int64_t before = cluster.coordinator().control_stats().up_messages.load();
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
  const int64_t messages = cluster.coordinator().control_stats().up_messages.load() - before;
  // One batch per rank (sent by its first Wait), and perhaps a wait state if one rank waits
  // 50 ms for the other; without the cycle, a message per request.
  EXPECT_LE(messages, 2 * kRanks) << messages << " messages for " << kRanks * kTensors
                                  << " requests";
}

TEST(SendCycleTest, AWaitOrAPollSendsHeldRequestsAtOnce) {
  TestCluster cluster(WithCycle(absl::Seconds(30)));
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
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "held for the 30 s cycle";
}

TEST(SendCycleTest, ARequestNobodyWaitsForLeavesWhenTheCycleEnds) {
  TestCluster cluster(WithCycle(absl::Milliseconds(100)));
  auto contexts = cluster.Join("job", kRanks);
  WarmUp(contexts);
  absl::Duration rank0_waited;
  OnEveryRank(kRanks, [&](int rank) {
    float x = 1;
    const absl::Time start = absl::Now();
    Handle h = contexts[rank]->Allreduce("async", &x, &x, DataType::kFloat32, {1});
    if (rank == 0) {
      ASSERT_TRUE(h.Wait().ok());
      rank0_waited = absl::Now() - start;
    } else {
      // Computes for 3 s without looking at its handle: its request must leave on its own.
      std::this_thread::sleep_for(std::chrono::seconds(3));
      ASSERT_TRUE(h.Wait().ok());
    }
    EXPECT_EQ(x, 2.0f);
  });
  EXPECT_LT(rank0_waited, absl::Milliseconds(1500)) << "rank 1's request waited for its Wait";
}

TEST(SendCycleTest, CycleTimeZeroSendsEachRequestAtOnce) {
  TestCluster cluster(WithCycle(absl::ZeroDuration()));
  auto contexts = cluster.Join("job", kRanks);
  WarmUp(contexts);
  const int64_t before = cluster.coordinator().control_stats().up_messages.load();
  OnEveryRank(kRanks, [&](int rank) {
    std::vector<float> data(5, 1.0f);
    std::vector<Handle> handles;
    for (int t = 0; t < 5; ++t) {
      handles.push_back(contexts[rank]->Allreduce(absl::StrCat("grad/", t), &data[t], &data[t],
                                                  DataType::kFloat32, {1}));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the sender sends each
    }
    for (Handle& h : handles) ASSERT_TRUE(h.Wait().ok());
  });
  EXPECT_GE(cluster.coordinator().control_stats().up_messages.load() - before, 5 * kRanks);
}

}  // namespace
}  // namespace troika::testing
