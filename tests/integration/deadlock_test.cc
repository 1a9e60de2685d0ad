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

}  // namespace
}  // namespace troika::testing
