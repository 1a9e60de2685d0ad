#include "coordinator/inspection/stall_inspector.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

StallOptions Options(absl::Duration warning, absl::Duration shutdown = absl::ZeroDuration()) {
  StallOptions o;
  o.warning_time = warning;
  o.shutdown_time = shutdown;
  return o;
}

TEST(StallInspectorTest, TensorWithinWarningTimeIsNotReported) {
  StallInspector inspector(Options(absl::Seconds(60)));
  std::vector<PendingTensor> pending = {{"grad/a", kT0, {1}}};
  StallReport report = inspector.Inspect(pending, kT0 + absl::Seconds(60));
  EXPECT_THAT(report.newly_stalled, IsEmpty());
  EXPECT_THAT(report.past_shutdown, IsEmpty());
}

TEST(StallInspectorTest, StalledTensorIsReportedOnceWithItsMissingRanks) {
  StallInspector inspector(Options(absl::Seconds(60)));
  std::vector<PendingTensor> pending = {{"grad/a", kT0, {1, 3}}};
  StallReport first = inspector.Inspect(pending, kT0 + absl::Seconds(75));
  ASSERT_EQ(first.newly_stalled.size(), 1u);
  EXPECT_EQ(first.newly_stalled[0].name, "grad/a");
  EXPECT_EQ(first.newly_stalled[0].waiting, absl::Seconds(75));
  EXPECT_THAT(first.newly_stalled[0].missing_ranks, ElementsAre(1, 3));
  StallReport second = inspector.Inspect(pending, kT0 + absl::Seconds(500));
  EXPECT_THAT(second.newly_stalled, IsEmpty());
}

TEST(StallInspectorTest, SameNameSubmittedAgainAfterCompletingIsReportedAgain) {
  StallInspector inspector(Options(absl::Seconds(60)));
  ASSERT_EQ(inspector.Inspect({{"x", kT0, {1}}}, kT0 + absl::Seconds(61)).newly_stalled.size(), 1u);
  // Still pending under the same first arrival: not again.
  EXPECT_THAT(inspector.Inspect({{"x", kT0, {1}}}, kT0 + absl::Seconds(62)).newly_stalled,
              IsEmpty());
  // Completed, then a new submission of "x" stalls.
  const absl::Time again = kT0 + absl::Seconds(100);
  EXPECT_THAT(inspector.Inspect({}, again).newly_stalled, IsEmpty());
  EXPECT_EQ(inspector.Inspect({{"x", again, {0}}}, again + absl::Seconds(61)).newly_stalled.size(),
            1u);
}

TEST(StallInspectorTest, TensorPastShutdownTimeIsReportedEveryTime) {
  StallInspector inspector(Options(absl::Seconds(60), absl::Seconds(120)));
  std::vector<PendingTensor> pending = {{"old", kT0, {2}}, {"new", kT0 + absl::Seconds(100), {2}}};
  StallReport report = inspector.Inspect(pending, kT0 + absl::Seconds(121));
  ASSERT_EQ(report.past_shutdown.size(), 1u);
  EXPECT_EQ(report.past_shutdown[0].name, "old");
  EXPECT_EQ(inspector.Inspect(pending, kT0 + absl::Seconds(122)).past_shutdown.size(), 1u);
}

TEST(StallInspectorTest, ZeroShutdownTimeNeverShutsDown) {
  StallInspector inspector(Options(absl::Seconds(60)));
  StallReport report = inspector.Inspect({{"x", kT0, {1}}}, kT0 + absl::Hours(100));
  EXPECT_THAT(report.past_shutdown, IsEmpty());
}

TEST(StallInspectorTest, NextCheckIsEarliestUnreportedWarningOrShutdown) {
  StallInspector inspector(Options(absl::Seconds(60), absl::Seconds(300)));
  std::vector<PendingTensor> pending = {{"a", kT0, {1}}, {"b", kT0 + absl::Seconds(10), {1}}};
  EXPECT_EQ(inspector.NextCheck(pending), kT0 + absl::Seconds(60));
  inspector.Inspect(pending, kT0 + absl::Seconds(65));  // reports "a" only
  EXPECT_EQ(inspector.NextCheck(pending), kT0 + absl::Seconds(70));
  inspector.Inspect(pending, kT0 + absl::Seconds(71));  // reports "b"
  EXPECT_EQ(inspector.NextCheck(pending), kT0 + absl::Seconds(300));
}

TEST(StallInspectorTest, NextCheckIsNeverWhenNothingIsPending) {
  StallInspector inspector(Options(absl::Seconds(60), absl::Seconds(300)));
  EXPECT_EQ(inspector.NextCheck({}), absl::InfiniteFuture());
}

TEST(StallInspectorTest, NextCheckIsNeverOnceAllReportedAndShutdownIsOff) {
  StallInspector inspector(Options(absl::Seconds(60)));
  std::vector<PendingTensor> pending = {{"a", kT0, {1}}};
  inspector.Inspect(pending, kT0 + absl::Seconds(61));
  EXPECT_EQ(inspector.NextCheck(pending), absl::InfiniteFuture());
}

TEST(StallInspectorTest, MessageNamesEveryTensorItsWaitAndMissingRanks) {
  std::vector<StalledTensor> stalled = {{"grad/a", absl::Seconds(75), {1, 3}},
                                        {"grad/b", absl::Seconds(62), {2}}};
  EXPECT_EQ(FormatStalls(stalled, absl::Seconds(60)),
            "2 tensors stalled for more than 1m: 'grad/a' (waiting 1m15s) is "
            "missing ranks 1, 3; 'grad/b' (waiting 1m2s) is missing rank 2");
}

}  // namespace
}  // namespace troika::coordinator
