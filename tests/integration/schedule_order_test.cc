// Steady-state schedules for ranks whose steps submit their tensors in varying order (a graph
// executor running independent ops as its threads reach them): the coordinator takes the step
// as a set period (docs/design/schedules.md, "Set periods"), every rank executes the
// schedule's one order whatever its own, and results are bit for bit negotiation's.

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/request_counter.h"
#include "tests/integration/schedule_steps.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing::schedule_steps {
namespace {

// How each rank learns of its step's completions: Handle::Wait after submitting every tensor
// (an eager loop), or Handle::OnDone callbacks that no thread waits on (a graph's async
// kernels: caller_waits=false) and a count the step waits for.
enum class Completion { kWait, kOnDone };

// One step: each rank submits tensors "t<i>" of `sizes[i]` floats in an order of its own for
// this step, after a pause of 20 ms (a forward pass), then waits for them all.
StepResults ShuffledStep(std::vector<std::unique_ptr<Context>>& contexts,
                         const std::vector<int64_t>& sizes, int step, Completion completion) {
  absl::SleepFor(absl::Milliseconds(20));
  StepResults results(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    std::vector<std::vector<float>>& mine = results[rank];
    for (size_t t = 0; t < sizes.size(); ++t) {
      mine.push_back(Input(rank, static_cast<int>(t), sizes[t]));
    }
    std::vector<size_t> order(sizes.size());
    for (size_t t = 0; t < order.size(); ++t) order[t] = t;
    std::mt19937 gen(static_cast<uint32_t>(step * 7919 + rank));
    std::ranges::shuffle(order, gen);
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    std::vector<absl::Status> statuses(sizes.size());
    std::vector<Handle> handles(sizes.size());
    for (size_t t : order) {
      handles[t] = contexts[rank]->Allreduce(absl::StrCat("t", t), mine[t].data(), mine[t].data(),
                                             DataType::kFloat32, {sizes[t]});
      if (completion != Completion::kOnDone) continue;
      handles[t].OnDone(
          [&, t](const absl::Status& s) {
            std::lock_guard<std::mutex> lock(mu);
            statuses[t] = s;
            ++done;
            cv.notify_all();
          },
          /*caller_waits=*/false);
    }
    if (completion == Completion::kOnDone) {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done == order.size(); }))
          << "rank " << rank << ": step " << step << " did not complete";
    } else {
      std::ranges::shuffle(order, gen);
      for (size_t t : order) statuses[t] = handles[t].Wait();
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      ASSERT_TRUE(statuses[t].ok()) << "rank " << rank << ", t" << t << ": " << statuses[t];
    }
  });
  return results;
}

void ExpectShuffledStepsScheduled(coordinator::CoordinatorOptions options, Completion completion) {
  TestCluster cluster(options);
  RequestCounter sent(kRanks);
  auto contexts = JoinCounting(cluster, "job", kRanks, sent);
  const std::vector<int64_t> sizes = {1, 3, 1000, 5, 300'000, 7, 64, 2};
  const StepResults first = ShuffledStep(contexts, sizes, 0, completion);
  ExpectSums(first, sizes, "step 0");
  constexpr int kSteps = 40;
  int64_t before_last = 0;
  for (int s = 1; s < kSteps; ++s) {
    if (s == kSteps - 10) {
      before_last = sent.Total();
    }
    const StepResults results = ShuffledStep(contexts, sizes, s, completion);
    for (int r = 0; r < kRanks; ++r) {
      for (size_t t = 0; t < sizes.size(); ++t) {
        ASSERT_EQ(0, std::memcmp(results[r][t].data(), first[r][t].data(),
                                 results[r][t].size() * sizeof(float)))
            << "step " << s << ", rank " << r << ", t" << t << " differs from step 0";
      }
    }
  }
  // Negotiated, 10 steps send at least 10 * kRanks messages of requests; scheduled, none.
  // (Wait states and progress reports still go up, as many as the machine's speed makes.)
  EXPECT_LT(sent.Total() - before_last, 2 * kRanks)
      << "the last 10 steps still sent requests: no schedule formed";
  std::shared_ptr<coordinator::Job> job = FindJob(cluster);
  ASSERT_NE(job, nullptr);
  const coordinator::ScheduleInfo info = job->Describe().schedules;
  EXPECT_GE(info.active, 1) << "no schedule in force";
  EXPECT_EQ(info.tensors, static_cast<int>(sizes.size()));
  EXPECT_EQ(info.executing_ranks, kRanks);
  ShutdownAll(contexts);
}

// One collective per tensor (fusion threshold 0): each tensor's result is its own allreduce's
// in every step, negotiated or scheduled.
TEST(ScheduleOrderTest, ShuffledStepsFormAScheduleAndKeepTheirBitsWaited) {
  ExpectShuffledStepsScheduled(Schedules(true, /*fusion_threshold_bytes=*/0), Completion::kWait);
}

TEST(ScheduleOrderTest, ShuffledStepsFormAScheduleAndKeepTheirBitsWithCallbacks) {
  ExpectShuffledStepsScheduled(Schedules(true, /*fusion_threshold_bytes=*/0), Completion::kOnDone);
}

}  // namespace
}  // namespace troika::testing::schedule_steps
