// StragglerMonitor: fed the job's set-0 tensors as a negotiation observer, it checks for
// stragglers every few dozen tensors and logs a change at most every 30 s.

#include "coordinator/inspection/straggler_monitor.h"

#include <vector>

#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

// `n` tensors that rank `late` of 2 submitted `by` after the other.
std::vector<ReadyRecord> Late(int n, int late, absl::Duration by) {
  std::vector<ReadyRecord> records(n);
  for (ReadyRecord& r : records) {
    r.arrivals = {kT0, kT0};
    r.arrivals[late] += by;
  }
  return records;
}

TEST(StragglerMonitorTest, OnlyTheWholeJobsTensorsAreCounted) {
  StragglerMonitor monitor("job", 2, absl::Milliseconds(10));
  NegotiationObserver& observer = monitor;
  // A process set's arrivals are by position in the set, not by the job's rank.
  observer.OnReady(1, Late(3, 1, absl::Milliseconds(50)), kT0);
  EXPECT_EQ(monitor.Snapshot().tensors, 0);
  observer.OnReady(0, Late(3, 1, absl::Milliseconds(50)), kT0);
  EXPECT_EQ(monitor.Snapshot().tensors, 3);
  EXPECT_EQ(monitor.Snapshot().ranks[1].max_lateness, absl::Milliseconds(50));
  EXPECT_EQ(monitor.Stragglers(), std::vector<int>{1});
}

TEST(StragglerMonitorTest, StragglersAreCheckedEveryFewDozenTensorsAndLoggedAtMostEvery30s) {
  StragglerMonitor monitor("job", 2, absl::Milliseconds(10));
  const int check = static_cast<int>(StragglerMonitor::kCheckEvery);
  monitor.OnReady(0, Late(check - 1, 1, absl::Milliseconds(50)), kT0);
  EXPECT_EQ(monitor.Stragglers(), std::vector<int>{1});
  EXPECT_TRUE(monitor.logged().empty()) << "not checked yet";
  monitor.OnReady(0, Late(1, 1, absl::Milliseconds(50)), kT0);
  EXPECT_EQ(monitor.logged(), std::vector<int>{1});
  // Rank 0 turns slow: the change is seen within 30 s of the last log, and not logged.
  monitor.OnReady(0, Late(256, 0, absl::Milliseconds(50)), kT0 + absl::Seconds(10));
  EXPECT_EQ(monitor.Stragglers(), std::vector<int>{0});
  EXPECT_EQ(monitor.logged(), std::vector<int>{1});
  // Later, but fewer tensors than a check needs since the last check: not yet.
  monitor.OnReady(0, Late(check - 1, 0, absl::Milliseconds(50)), kT0 + absl::Seconds(31));
  EXPECT_EQ(monitor.logged(), std::vector<int>{1});
  monitor.OnReady(0, Late(1, 0, absl::Milliseconds(50)), kT0 + absl::Seconds(31));
  EXPECT_EQ(monitor.logged(), std::vector<int>{0});
  // Nobody late any more: logged once as no stragglers.
  monitor.OnReady(0, Late(256, 0, absl::ZeroDuration()), kT0 + absl::Seconds(62));
  EXPECT_TRUE(monitor.Stragglers().empty());
  EXPECT_TRUE(monitor.logged().empty());
}

}  // namespace
}  // namespace troika::coordinator
