#include "libclient/wait_tracker.h"

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

}  // namespace
}  // namespace troika::internal
