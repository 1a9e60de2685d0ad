// Step timing end to end: ranks as threads over a real coordinator and Gloo on loopback mark
// their steps (Context::MarkStep, ScopedStep, troika_mark_step) around allreduces and
// "compute" (sleeps), and get back splits that add up.

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/integration/forwarding_channel.h"
#include "tests/integration/test_cluster.h"
#include "troika/c_api.h"

namespace troika::testing {
namespace {

constexpr absl::Duration kCompute = absl::Milliseconds(20);
constexpr int kSteps = 4;
// kStepReportInterval (1 s), and slack for a loaded machine.
constexpr absl::Duration kStepReportDeadline = absl::Seconds(3);

void Sleep(absl::Duration d) { std::this_thread::sleep_for(absl::ToChronoNanoseconds(d)); }

// One training step's communication: an allreduce of `values`, waited for.
absl::Status Exchange(Context& ctx, const std::string& name, std::vector<float>& values) {
  return ctx
      .Allreduce(name, values.data(), values.data(), DataType::kFloat32,
                 {static_cast<int64_t>(values.size())})
      .Wait();
}

void ExpectStep(const StepTiming& t, absl::Duration min_compute, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(t.total, t.compute + t.negotiation_wait + t.communication);
  // The sleep is compute, except where the executor was still finishing the previous
  // operation (its handle completes a moment before the executor's work ends): that overlap
  // counts as communication.
  EXPECT_GE(t.compute + t.communication, min_compute);
  EXPECT_GT(t.negotiation_wait + t.communication, absl::ZeroDuration());
  EXPECT_GE(t.negotiation_wait, absl::ZeroDuration());
  EXPECT_GE(t.communication, absl::ZeroDuration());
}

class StepTimingTest : public ::testing::TestWithParam<int> {};

TEST_P(StepTimingTest, MarkStepSplitsEachStepIntoComputeWaitAndCommunication) {
  const int size = GetParam();
  TestCluster cluster;
  auto contexts = cluster.Join(absl::StrCat("steps", size), size);
  OnEveryRank(size, [&](int rank) {
    Context& ctx = *contexts[rank];
    const StepTiming first = ctx.MarkStep();  // only starts
    EXPECT_EQ(first.total, absl::ZeroDuration());
    std::vector<float> grad(1 << 16, 1.0f);
    for (int step = 0; step < kSteps; ++step) {
      // Uneven compute: the faster ranks wait for the slowest in negotiation.
      Sleep(kCompute + absl::Milliseconds(5 * rank));
      ASSERT_TRUE(Exchange(ctx, absl::StrCat("grad", step % 2), grad).ok());
      ExpectStep(ctx.MarkStep(), kCompute, absl::StrCat("rank ", rank, " step ", step));
    }
    EXPECT_FLOAT_EQ(grad[0], static_cast<float>(std::pow(size, kSteps)));
  });
  for (auto& c : contexts) EXPECT_TRUE(c->Shutdown().ok());
}

INSTANTIATE_TEST_SUITE_P(Ranks, StepTimingTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return absl::StrCat(info.param, "ranks"); });

TEST(StepTimingScopeTest, ScopedStepAndEndStepBracketOneStep) {
  TestCluster cluster;
  auto contexts = cluster.Join("scoped", 2);
  OnEveryRank(2, [&](int rank) {
    Context& ctx = *contexts[rank];
    EXPECT_EQ(ctx.EndStep().total, absl::ZeroDuration());  // no step in progress
    std::vector<float> grad(1024, 1.0f);
    {
      ScopedStep step(ctx);
      Sleep(kCompute);
      ASSERT_TRUE(Exchange(ctx, "scoped", grad).ok());
    }                                                      // ended and queued here
    EXPECT_EQ(ctx.EndStep().total, absl::ZeroDuration());  // already ended
    ctx.StartStep();
    Sleep(kCompute);
    ASSERT_TRUE(Exchange(ctx, "explicit", grad).ok());
    ExpectStep(ctx.EndStep(), kCompute, absl::StrCat("rank ", rank));
  });
  for (auto& c : contexts) EXPECT_TRUE(c->Shutdown().ok());
}

// Failed operations — at submission, or failed by the coordinator — finish too: the next
// step, with nothing in flight, is pure compute.
TEST(StepTimingScopeTest, FailedOperationsLeaveNoWaitBehind) {
  TestCluster cluster;
  auto contexts = cluster.Join("failed", 2);
  OnEveryRank(2, [&](int rank) {
    Context& ctx = *contexts[rank];
    ctx.MarkStep();
    std::vector<float> values(4, 1.0f);
    // Shapes differ between the ranks: the coordinator fails it on both.
    EXPECT_FALSE(ctx.Allreduce("mismatch", values.data(), values.data(), DataType::kFloat32,
                               {rank == 0 ? 4 : 3})
                     .Wait()
                     .ok());
    // Invalid here: fails at once.
    EXPECT_FALSE(
        ctx.Allreduce("bad", values.data(), values.data(), DataType::kFloat32, {-1}).Wait().ok());
    ExpectStep(ctx.MarkStep(), absl::ZeroDuration(), absl::StrCat("rank ", rank));
    // Long enough that the sliver below stays a sliver on a loaded machine, where the
    // executor's thread may wait a while for a core.
    Sleep(absl::Milliseconds(200));
    const StepTiming idle = ctx.MarkStep();
    // A leaked operation would count the whole sleep as waiting. (The executor may still be
    // finishing the failed response's work as this step begins: a sliver of communication.)
    EXPECT_EQ(idle.negotiation_wait, absl::ZeroDuration()) << "rank " << rank;
    EXPECT_EQ(idle.total, idle.compute + idle.communication);
    EXPECT_GE(idle.total, absl::Milliseconds(200));
    // The sleep is compute but for that sliver (it once read 4.988 ms of 5).
    EXPECT_GT(idle.compute, idle.communication) << "rank " << rank;
  });
  for (auto& c : contexts) EXPECT_TRUE(c->Shutdown().ok());
}

TEST(StepTimingCApiTest, MarkStepThroughTheCAbi) {
  TestCluster cluster;
  const std::string address = cluster.address();
  EXPECT_EQ(troika_mark_step(nullptr, nullptr), 3);
  OnEveryRank(2, [&](int rank) {
    troika_context* ctx = nullptr;
    ASSERT_EQ(troika_init(address.c_str(), "csteps", rank, 2, &ctx), 0) << troika_last_error();
    troika_step_timing t;
    ASSERT_EQ(troika_mark_step(ctx, &t), 0);
    EXPECT_EQ(t.total_seconds, 0.0);
    Sleep(kCompute);
    float grad[3] = {1.0f, 2.0f, 3.0f};
    int64_t shape[1] = {3};
    troika_handle* h = nullptr;
    ASSERT_EQ(
        troika_allreduce(ctx, "g", grad, grad, TROIKA_FLOAT32, shape, 1, TROIKA_SUM, 1.0, 1.0, &h),
        0);
    EXPECT_EQ(troika_handle_wait(h), 0) << troika_last_error();
    troika_handle_free(h);
    ASSERT_EQ(troika_mark_step(ctx, &t), 0);
    EXPECT_GE(t.compute_seconds, absl::ToDoubleSeconds(kCompute));
    EXPECT_GT(t.negotiation_wait_seconds + t.communication_seconds, 0.0);
    EXPECT_NEAR(t.total_seconds,
                t.compute_seconds + t.negotiation_wait_seconds + t.communication_seconds, 1e-9);
    EXPECT_EQ(troika_mark_step(ctx, nullptr), 0);
    EXPECT_EQ(troika_shutdown(ctx), 0) << troika_last_error();
    troika_free(ctx);
  });
}

// What a rank sent up, seen by RecordingChannel.
struct Sent {
  absl::Mutex mu;
  std::vector<size_t> report_steps ABSL_GUARDED_BY(mu);  // steps in each ExecReport
  size_t steps_after_goodbye ABSL_GUARDED_BY(mu) = 0;
  bool goodbye ABSL_GUARDED_BY(mu) = false;

  size_t steps() {
    absl::MutexLock lock(&mu);
    size_t n = 0;
    for (size_t s : report_steps) n += s;
    return n;
  }
};

// The real gRPC channel, recording the ExecReports and the goodbye that go through it.
class RecordingChannel : public ForwardingChannel {
 public:
  RecordingChannel(std::unique_ptr<internal::ControlChannel> inner, std::shared_ptr<Sent> sent)
      : ForwardingChannel(std::move(inner)), sent_(std::move(sent)) {}
  absl::Status SendExecReport(const ExecReport& report) override {
    {
      absl::MutexLock lock(&sent_->mu);
      if (sent_->goodbye) sent_->steps_after_goodbye += report.steps.size();
      sent_->report_steps.push_back(report.steps.size());
    }
    return ForwardingChannel::SendExecReport(report);
  }
  absl::Status Goodbye(const std::vector<int>& ranks) override {
    {
      absl::MutexLock lock(&sent_->mu);
      sent_->goodbye = true;
    }
    return ForwardingChannel::Goodbye(ranks);
  }

 private:
  std::shared_ptr<Sent> sent_;
};

// Without a timeline or autotuning the coordinator asks for no ExecReports; ended steps go up
// anyway, within about a second, and the last ones in a final report before goodbye.
TEST(StepReportTest, StepsGoUpWithinSecondsAndTheLastBeforeGoodbye) {
  TestCluster cluster;
  std::vector<std::shared_ptr<Sent>> sent;
  for (int r = 0; r < 2; ++r) sent.push_back(std::make_shared<Sent>());
  std::vector<std::unique_ptr<Context>> contexts =
      JoinThrough(cluster, "reports", 2, [&](int rank, auto real) {
        return std::make_unique<RecordingChannel>(std::move(real), sent[rank]);
      });
  ASSERT_TRUE(contexts[0] && contexts[1]);
  OnEveryRank(2, [&](int rank) {
    Context& ctx = *contexts[rank];
    std::vector<float> grad(16, 1.0f);
    ctx.MarkStep();
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(Exchange(ctx, "g", grad).ok());
      ctx.MarkStep();
    }
    const absl::Time ended = absl::Now();
    while (sent[rank]->steps() < 3 && absl::Now() < ended + absl::Seconds(10)) {
      Sleep(absl::Milliseconds(10));
    }
    const absl::Duration took = absl::Now() - ended;
    EXPECT_EQ(sent[rank]->steps(), 3u) << "rank " << rank;
    EXPECT_LT(took, kStepReportDeadline) << "rank " << rank;
    {
      absl::MutexLock lock(&sent[rank]->mu);
      // One report for the three steps, not one each (nothing else asked for reports).
      EXPECT_EQ(sent[rank]->report_steps.size(), 1u) << "rank " << rank;
    }
    ctx.MarkStep();  // a fourth step, ended just before shutdown
  });
  for (auto& c : contexts) EXPECT_TRUE(c->Shutdown().ok());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(sent[rank]->steps(), 4u) << "rank " << rank;
    absl::MutexLock lock(&sent[rank]->mu);
    EXPECT_TRUE(sent[rank]->goodbye);
    EXPECT_EQ(sent[rank]->steps_after_goodbye, 0u) << "the final report precedes goodbye";
  }
}

}  // namespace
}  // namespace troika::testing
