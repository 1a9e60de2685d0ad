#include "libclient/execution/exec_stats.h"

#include "gtest/gtest.h"

namespace troika::internal {
namespace {

StepSample Step(int64_t ms) {
  return {absl::Milliseconds(ms), absl::Milliseconds(ms), absl::ZeroDuration(),
          absl::ZeroDuration()};
}

TEST(ExecStatsTest, TakeCarriesQueuedStepsOnce) {
  ExecStats stats;
  ExecReport report;
  EXPECT_TRUE(stats.Take(3, absl::UnixEpoch(), &report));   // the first report: bytes
  EXPECT_FALSE(stats.Take(3, absl::UnixEpoch(), &report));  // nothing new
  EXPECT_FALSE(stats.steps_pending());

  EXPECT_TRUE(stats.AddStep(Step(5)));   // the first since the last report
  EXPECT_FALSE(stats.AddStep(Step(7)));  // rides along
  EXPECT_TRUE(stats.steps_pending());
  report = {};
  ASSERT_TRUE(stats.Take(3, absl::UnixEpoch(), &report));  // pending steps alone suffice
  EXPECT_EQ(report.rank, 3);
  ASSERT_EQ(report.steps.size(), 2u);
  EXPECT_EQ(report.steps[0].duration, absl::Milliseconds(5));
  EXPECT_EQ(report.steps[1].duration, absl::Milliseconds(7));
  EXPECT_FALSE(stats.steps_pending());

  report = {};
  EXPECT_FALSE(stats.Take(3, absl::UnixEpoch(), &report));
  EXPECT_TRUE(report.steps.empty());
  EXPECT_TRUE(stats.AddStep(Step(1)));  // first again after the report
}

TEST(ExecStatsTest, DropsTheOldestStepsBeyondTheBound) {
  ExecStats stats;
  const size_t extra = 10;
  for (size_t i = 0; i < ExecStats::kMaxPendingSteps + extra; ++i) {
    stats.AddStep(Step(static_cast<int64_t>(i)));
  }
  EXPECT_EQ(stats.dropped_steps(), static_cast<int64_t>(extra));
  ExecReport report;
  ASSERT_TRUE(stats.Take(0, absl::UnixEpoch(), &report));
  ASSERT_EQ(report.steps.size(), ExecStats::kMaxPendingSteps);
  EXPECT_EQ(report.steps.front().duration, absl::Milliseconds(static_cast<int64_t>(extra)));
}

}  // namespace
}  // namespace troika::internal
