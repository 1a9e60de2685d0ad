#include "libclient/handles/wait_tracker.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::internal {
namespace {

using ::testing::ElementsAre;

// Records the wait states as "rank: a b".
class WaitTrackerTest : public ::testing::Test {
 protected:
  WaitTracker tracker_{2, [this](WaitState s) {
                         std::string text = std::to_string(s.rank) + ":";
                         for (const std::string& n : s.waiting_for) text += " " + n;
                         sent_.push_back(text);
                       }};
  std::vector<std::string> sent_;
};

TEST_F(WaitTrackerTest, SendsTheBlockedSetOnChangeAndOneEmptyStateWhenAllReturn) {
  uint64_t b = tracker_.Blocked("b");
  uint64_t a = tracker_.Blocked("a");
  uint64_t a2 = tracker_.Blocked("a");  // a second thread on the same op: no change
  tracker_.Unblocked(a);
  tracker_.Unblocked(b);
  tracker_.Unblocked(a2);
  EXPECT_THAT(sent_, ElementsAre("2: b", "2: a b", "2: a", "2:"));
}

TEST_F(WaitTrackerTest, NothingIsSentAfterDetach) {
  uint64_t a = tracker_.Blocked("a");
  tracker_.Detach();
  tracker_.Unblocked(a);
  tracker_.Blocked("b");
  EXPECT_THAT(sent_, ElementsAre("2: a"));
}

// Polling: a run of polls spanning kBlockedAfter registers, as a lease renewed by each poll.
TEST_F(WaitTrackerTest, PollsSpanningBlockedAfterRegisterTheOpAndRenewTheLease) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  tracker_.Polled(7, "a", t0);
  tracker_.Polled(7, "a", t0 + kBlockedAfter / 2);
  EXPECT_THAT(sent_, ElementsAre());  // not yet polling for kBlockedAfter
  EXPECT_EQ(tracker_.Expire(t0 + kBlockedAfter / 2), absl::InfiniteFuture());
  tracker_.Polled(7, "a", t0 + kBlockedAfter);
  EXPECT_THAT(sent_, ElementsAre("2: a"));
  // Each poll renews it: still registered well past the first poll's lease.
  absl::Time t = t0 + kBlockedAfter;
  for (int i = 0; i < 10; ++i) {
    t += kPollLease / 2;
    EXPECT_EQ(tracker_.Expire(t), t - kPollLease / 2 + kPollLease);
    tracker_.Polled(7, "a", t);
  }
  EXPECT_EQ(tracker_.Expire(t + kPollLease / 2), t + kPollLease);
  EXPECT_THAT(sent_, ElementsAre("2: a"));
}

TEST_F(WaitTrackerTest, ARegistrationByPollingLapsesWhenThePollsStop) {
  int wakes = 0;
  tracker_.SetWake([&] { ++wakes; });
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Time t1 = t0 + kBlockedAfter;
  tracker_.Polled(7, "a", t0);
  tracker_.Polled(7, "a", t1);
  EXPECT_EQ(wakes, 1);  // the registration began: Expire must be called by t1 + kPollLease
  EXPECT_EQ(tracker_.Expire(t1 + kPollLease - absl::Milliseconds(1)), t1 + kPollLease);
  EXPECT_THAT(sent_, ElementsAre("2: a"));
  EXPECT_EQ(tracker_.Expire(t1 + kPollLease), absl::InfiniteFuture());
  EXPECT_THAT(sent_, ElementsAre("2: a", "2:"));
  // Polling again starts a new run: it must span kBlockedAfter again.
  const absl::Time t2 = t1 + 2 * kPollLease;
  tracker_.Polled(7, "a", t2);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2:"));
  tracker_.Polled(7, "a", t2 + kBlockedAfter);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2:", "2: a"));
  EXPECT_EQ(wakes, 2);
}

TEST_F(WaitTrackerTest, PollsSeparatedByMoreThanTheLeaseNeverRegister) {
  // A rank that polls an op now and then between long computations is not blocked on it.
  absl::Time t = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 5; ++i, t += kPollLease + absl::Milliseconds(1)) tracker_.Polled(7, "a", t);
  // Even when nobody called Expire in between.
  EXPECT_THAT(sent_, ElementsAre());
  EXPECT_EQ(tracker_.Expire(t), absl::InfiniteFuture());
}

TEST_F(WaitTrackerTest, ARunThatStoppedIsANewRunEvenBeforeExpireNoticed) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  tracker_.Polled(7, "a", t0);
  tracker_.Polled(7, "a", t0 + kBlockedAfter);
  const absl::Time t1 = t0 + kBlockedAfter + kPollLease;
  tracker_.Polled(7, "a", t1);  // the lease had lapsed: a new run, not yet blocked
  EXPECT_THAT(sent_, ElementsAre("2: a", "2:"));
  tracker_.Polled(7, "a", t1 + kBlockedAfter);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2:", "2: a"));
}

TEST_F(WaitTrackerTest, ARegistrationByPollingEndsWhenTheOpCompletes) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  tracker_.Polled(7, "a", t0);
  tracker_.Polled(8, "b", t0);
  tracker_.Polled(7, "a", t0 + kBlockedAfter);
  tracker_.Polled(8, "b", t0 + kBlockedAfter);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2: a b"));
  tracker_.PollEnded(7);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2: a b", "2: b"));
  tracker_.PollEnded(7);  // again (Poll racing the completion): nothing changes
  tracker_.PollEnded(8);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2: a b", "2: b", "2:"));
  EXPECT_EQ(tracker_.Expire(t0 + kBlockedAfter), absl::InfiniteFuture());
  // A completed op polled once never registered: ending it sends nothing.
  tracker_.Polled(9, "c", t0);
  tracker_.PollEnded(9);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2: a b", "2: b", "2:"));
}

TEST_F(WaitTrackerTest, PollingAndWaitingOnTheSameOpAreOneName) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  uint64_t w = tracker_.Blocked("a");
  tracker_.Polled(7, "a", t0);
  tracker_.Polled(7, "a", t0 + kBlockedAfter);
  tracker_.Unblocked(w);  // still polled
  EXPECT_THAT(sent_, ElementsAre("2: a"));
  tracker_.Expire(t0 + kBlockedAfter + kPollLease);
  EXPECT_THAT(sent_, ElementsAre("2: a", "2:"));
}

// Handle::OnDone(caller_waits): a wait with no Troika thread in it counts from kBlockedAfter,
// registered by Expire (woken to look); one that ends sooner costs no message.
TEST_F(WaitTrackerTest, AWaitByCallbackRegistersOnceItIsBlockedAfterOld) {
  int wakes = 0;
  tracker_.SetWake([&] { ++wakes; });
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const uint64_t quick = tracker_.BlockedFrom("quick", t0);
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(tracker_.Expire(t0 + kBlockedAfter / 2), t0 + kBlockedAfter);
  tracker_.Unblocked(quick);  // done in time: nothing sent
  EXPECT_EQ(tracker_.Expire(t0 + kBlockedAfter), absl::InfiniteFuture());
  EXPECT_TRUE(sent_.empty());

  const uint64_t slow = tracker_.BlockedFrom("slow", t0);
  EXPECT_EQ(tracker_.Expire(t0 + kBlockedAfter), absl::InfiniteFuture());
  EXPECT_THAT(tracker_.BlockedNames(), ElementsAre("slow"));
  tracker_.Unblocked(slow);
  EXPECT_THAT(sent_, ElementsAre("2: slow", "2:"));
}

}  // namespace
}  // namespace troika::internal
