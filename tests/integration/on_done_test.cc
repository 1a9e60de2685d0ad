// Handle::OnDone: the callback runs exactly once with the operation's outcome, after the
// results are written (at once, on the caller's thread, if the operation already finished);
// a failure reaches it; a callback may submit the next operation (a front end completing its
// framework's asynchronous kernel from it: troika.tensorflow).

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace troika::testing {
namespace {

constexpr int kRanks = 2;

// A status delivered once, waited for by the test.
class Outcome {
 public:
  void Set(const absl::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    status_ = s;
    thread_ = std::this_thread::get_id();
    cv_.notify_all();
  }
  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return calls_ > 0; });
    return status_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::thread::id thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return thread_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  absl::Status status_;
  std::thread::id thread_;
};

TEST(OnDoneTest, RunsOnceWithTheResultWrittenAndMaySubmit) {
  TestCluster cluster;
  std::vector<std::unique_ptr<Context>> contexts = cluster.Join("job", kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    Context& c = *contexts[rank];
    std::vector<float> x(1000, rank + 1.0f);
    std::vector<float> y(4, rank + 1.0f);
    Outcome first, second;
    std::atomic<float> seen{0};
    Handle h2;
    std::mutex h2_mu;
    Handle h1 = c.Allreduce("first", x.data(), x.data(), DataType::kFloat32, {1000});
    h1.OnDone([&](const absl::Status& s) {
      seen = x[999];  // the result is there when the callback runs
      {
        std::lock_guard<std::mutex> lock(h2_mu);
        h2 = c.Allreduce("second", y.data(), y.data(), DataType::kFloat32, {4});
        h2.OnDone([&](const absl::Status& s2) { second.Set(s2); });
      }
      first.Set(s);
    });
    ASSERT_TRUE(first.Wait().ok()) << first.Wait();
    EXPECT_EQ(seen.load(), 3.0f);
    ASSERT_TRUE(second.Wait().ok()) << second.Wait();
    EXPECT_EQ(y[0], 3.0f);
    // Already finished: at once, on this thread.
    Outcome again;
    h1.OnDone([&](const absl::Status& s) { again.Set(s); });
    EXPECT_EQ(again.calls(), 1);
    EXPECT_EQ(again.thread(), std::this_thread::get_id());
    EXPECT_TRUE(again.Wait().ok());
    // Each callback ran once.
    EXPECT_EQ(first.calls(), 1);
    EXPECT_EQ(second.calls(), 1);
  });
}

TEST(OnDoneTest, AFailureReachesTheCallback) {
  TestCluster cluster;
  std::vector<std::unique_ptr<Context>> contexts = cluster.Join("job", kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    // Shapes differ between the ranks: the coordinator fails the op on both.
    std::vector<float> x(rank + 1, 1.0f);
    Outcome outcome;
    contexts[rank]
        ->Allreduce("mismatched", x.data(), x.data(), DataType::kFloat32,
                    {static_cast<int64_t>(rank + 1)})
        .OnDone([&](const absl::Status& s) { outcome.Set(s); });
    EXPECT_EQ(outcome.Wait().code(), absl::StatusCode::kFailedPrecondition) << outcome.Wait();
  });
  // Refused at submission (a null output): the callback runs on this thread, at once.
  Outcome refused;
  std::vector<float> in(2, 1.0f);
  contexts[0]
      ->Allreduce("null_out", in.data(), nullptr, DataType::kFloat32, {2})
      .OnDone([&](const absl::Status& s) { refused.Set(s); });
  EXPECT_EQ(refused.calls(), 1);
  EXPECT_EQ(refused.Wait().code(), absl::StatusCode::kInvalidArgument);
}

// Callers waiting by callback (an eager TensorFlow op each) on ops the other rank never
// submits: a deadlock, found as for threads in Wait(), instead of a hang. Without
// caller_waits the ranks could be computing, so nothing is declared.
TEST(OnDoneTest, CallersWaitingByCallbackOnDivergedOpsAreADeadlock) {
  TestCluster cluster;
  std::vector<std::unique_ptr<Context>> contexts = cluster.Join("job", kRanks);
  std::vector<absl::Status> statuses(kRanks);
  std::vector<absl::Duration> waited(kRanks);
  OnEveryRank(kRanks, [&](int rank) {
    const absl::Time start = absl::Now();
    float x = 1;
    Outcome outcome;
    contexts[rank]
        ->Allreduce(rank == 0 ? "only_on_0" : "only_on_1", &x, &x, DataType::kFloat32, {1})
        .OnDone([&](const absl::Status& s) { outcome.Set(s); }, /*caller_waits=*/true);
    statuses[rank] = outcome.Wait();
    waited[rank] = absl::Now() - start;
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_NE(statuses[r].message().find("deadlock"), std::string::npos) << statuses[r];
    EXPECT_LT(waited[r], absl::Seconds(5)) << "rank " << r;
  }
}

}  // namespace
}  // namespace troika::testing
