// HangDetector over a real JobNegotiation of 3 ranks: deadlocks among the ranks' reported
// waits and negotiation's pending tensors, and stalls warned about once, then past the
// shutdown time.

#include "coordinator/inspection/hang_detector.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/negotiation/negotiator_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::Allreduce;
using test_util::kT0;
using ::testing::HasSubstr;

constexpr int kSize = 3;

class HangDetectorTest : public ::testing::Test {
 protected:
  void Submit(const std::string& name, int rank, absl::Time at = kT0) {
    DownMessage misses;
    ASSERT_TRUE(negotiation_
                    .Submit(
                        {Allreduce(name, rank)}, at, [](int) { return absl::OkStatus(); }, misses)
                    .ok());
  }

  JobNegotiation negotiation_{"job", kSize, NegotiatorOptions{}, ScheduleOptions{},
                              [](std::shared_ptr<const DownMessage>) {}};
};

TEST_F(HangDetectorTest, EveryLiveRankBlockedOnItsOwnPendingTensorIsADeadlock) {
  HangDetector hangs(negotiation_, StallOptions{}, /*deadlock_detection=*/true);
  Submit("a", 0);
  Submit("b", 1);
  hangs.UpdateWaits(0, {"a"});
  hangs.UpdateWaits(1, {"b"});
  EXPECT_FALSE(hangs.Deadlock({}, kSize)) << "rank 2 is not blocked";
  Submit("c", 2);
  hangs.UpdateWaits(2, {"c"});
  std::optional<std::string> deadlock = hangs.Deadlock({}, kSize);
  ASSERT_TRUE(deadlock);
  EXPECT_THAT(*deadlock, HasSubstr("rank 2 waits for 'c'"));
  // Rank 2 leaves: the others still wait for each other's tensors.
  hangs.Forget(2);
  EXPECT_TRUE(hangs.Deadlock({2}, kSize));
  // A waited-for name that is not pending will complete: no deadlock.
  hangs.UpdateWaits(1, {"z"});
  EXPECT_FALSE(hangs.Deadlock({2}, kSize));
}

TEST_F(HangDetectorTest, DeadlockDetectionOffFindsNone) {
  HangDetector hangs(negotiation_, StallOptions{}, /*deadlock_detection=*/false);
  for (int r = 0; r < kSize; ++r) {
    Submit("t" + std::to_string(r), r);
    hangs.UpdateWaits(r, {"t" + std::to_string(r)});
  }
  EXPECT_FALSE(hangs.Deadlock({}, kSize));
}

TEST_F(HangDetectorTest, AStalledTensorIsWarnedAboutOnceThenEndsTheJobPastTheShutdownTime) {
  HangDetector hangs(negotiation_,
                     {.warning_time = absl::Seconds(60), .shutdown_time = absl::Seconds(120)},
                     /*deadlock_detection=*/true);
  EXPECT_EQ(hangs.FirstDeadline(), absl::Seconds(60));
  EXPECT_EQ(hangs.NextCheck(), absl::InfiniteFuture()) << "nothing pending";
  EXPECT_EQ(hangs.FirstCheck(kT0), absl::InfiniteFuture()) << "nothing pending";
  Submit("a", 0);
  EXPECT_EQ(hangs.NextCheck(), kT0 + absl::Seconds(60));
  EXPECT_EQ(hangs.FirstCheck(kT0 + absl::Seconds(1)), kT0 + absl::Seconds(61));
  HangDetector::Stalls stalls = hangs.InspectStalls(kT0 + absl::Seconds(30));
  EXPECT_FALSE(stalls.warning);
  EXPECT_EQ(stalls.next_check, kT0 + absl::Seconds(60));
  stalls = hangs.InspectStalls(kT0 + absl::Seconds(61));
  ASSERT_TRUE(stalls.warning);
  EXPECT_THAT(*stalls.warning, HasSubstr("'a'"));
  EXPECT_THAT(*stalls.warning, HasSubstr("is missing ranks 1-2"));
  EXPECT_THAT(*stalls.warning, HasSubstr("may have diverged"));
  EXPECT_FALSE(stalls.abort);
  EXPECT_EQ(stalls.next_check, kT0 + absl::Seconds(120));
  stalls = hangs.InspectStalls(kT0 + absl::Seconds(62));
  EXPECT_FALSE(stalls.warning) << "warned once";
  stalls = hangs.InspectStalls(kT0 + absl::Seconds(121));
  ASSERT_TRUE(stalls.abort);
  EXPECT_THAT(*stalls.abort, HasSubstr("(--stall_shutdown_time)"));
}

}  // namespace
}  // namespace troika::coordinator
