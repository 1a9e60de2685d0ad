// Roster on its own: attaches waiting for every rank, voided by a rank attaching again,
// timing out; memberships by host; node blocks; departed ranks.

#include "coordinator/job/roster.h"

#include <future>
#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Answer = std::optional<absl::StatusOr<std::vector<Membership>>>;

Roster::AttachCallback Into(Answer* answer) {
  return [answer](absl::StatusOr<std::vector<Membership>> m) { *answer = std::move(m); };
}

class RosterTest : public ::testing::Test {
 protected:
  Scheduler scheduler_;
  std::function<void(uint64_t)> never_ = [](uint64_t) {};
};

TEST_F(RosterTest, EveryRankAttachedGivesMembershipsByHost) {
  Roster roster("j", 4, 3, scheduler_);
  Answer a, b;
  roster.Wait({0, 1}, "x", absl::Seconds(30), Into(&a), never_);
  EXPECT_FALSE(roster.complete());
  roster.Wait({2, 3}, "y", absl::Seconds(30), Into(&b), never_);
  ASSERT_TRUE(roster.complete());
  EXPECT_FALSE(a.has_value()) << "answered only at Complete";
  roster.Complete();
  ASSERT_TRUE(a.has_value() && a->ok());
  ASSERT_TRUE(b.has_value() && b->ok());
  const std::vector<Membership>& m = **b;
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].rank, 2);
  EXPECT_EQ(m[0].local_rank, 0);
  EXPECT_EQ(m[1].local_rank, 1);
  EXPECT_EQ(m[1].local_size, 2);
  EXPECT_EQ(m[1].cross_rank, 1);
  EXPECT_EQ(m[1].cross_size, 2);
  EXPECT_EQ(m[1].epoch, 3);
  EXPECT_FALSE(roster.has_waiters());
  ASSERT_NE(roster.host(3), nullptr);
  EXPECT_EQ(*roster.host(3), "y");
  EXPECT_EQ(roster.membership(1)->local_rank, 1);
  EXPECT_EQ(roster.Of({3})[0].rank, 3);
}

TEST_F(RosterTest, ARankAttachingAgainVoidsTheAttachWaitingForIt) {
  Roster roster("j", 3, 1, scheduler_);
  Answer first, second;
  roster.Wait({0, 1}, "x", absl::Seconds(30), Into(&first), never_);
  roster.Wait({1}, "x", absl::Seconds(30), Into(&second), never_);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(first->status().message(), HasSubstr("attached again"));
  EXPECT_FALSE(second.has_value());
  std::vector<int> missing, attached;
  roster.Split(&missing, &attached);
  EXPECT_THAT(missing, ElementsAre(2));
  EXPECT_THAT(attached, ElementsAre(0, 1)) << "rank 0's host stays known";
}

TEST_F(RosterTest, AWaitThatTimesOutCallsExpireWithItsId) {
  Roster roster("j", 2, 1, scheduler_);
  Answer a;
  std::promise<uint64_t> expired;
  const uint64_t id = roster.Wait({0}, "x", absl::Milliseconds(10), Into(&a),
                                  [&expired](uint64_t id) { expired.set_value(id); });
  EXPECT_TRUE(roster.waiting(id));
  EXPECT_EQ(expired.get_future().get(), id);
  roster.FailWaiters(absl::DeadlineExceededError("late"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(roster.waiting(id));
  roster.ClearHosts();
  EXPECT_FALSE(roster.has_hosts());
}

TEST_F(RosterTest, NodeBlocksAreReservedOncePerHost) {
  Roster roster("j", 4, 2, scheduler_);
  bool added = false;
  absl::StatusOr<NodeBlock> first = roster.Reserve("x", 2, -1, &added);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(added);
  EXPECT_EQ(first->first_rank, 0);
  EXPECT_EQ(first->epoch, 2);
  absl::StatusOr<NodeBlock> again = roster.Reserve("x", 2, -1, &added);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(added) << "a restarted agent gets its block back";
  EXPECT_EQ(again->node_rank, 0);
  EXPECT_EQ(roster.Reserve("y", 2, 0, &added).status().code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<NodeBlock> second = roster.Reserve("y", 2, -1, &added);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->first_rank, 2);
  EXPECT_EQ(roster.Reserve("z", 2, -1, &added).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(roster.Reserve("z", 3, -1, &added).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(roster.nodes().size(), 2u);
  Roster restored("j", 4, 2, scheduler_);
  restored.AddNodes(roster.nodes());
  EXPECT_EQ(restored.Reserve("y", 2, -1, &added)->first_rank, 2);
}

TEST_F(RosterTest, DescribeGivesEachRanksHostMembershipAndDeparture) {
  Roster roster("j", 3, 1, scheduler_);
  Answer a, b;
  roster.Wait({0, 1}, "x", absl::Seconds(30), Into(&a), never_);
  std::vector<RankInfo> ranks = roster.Describe();
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[1].host, "x");
  EXPECT_TRUE(ranks[1].attached);
  EXPECT_EQ(ranks[1].local_rank, -1) << "not complete yet";
  EXPECT_FALSE(ranks[2].attached);
  EXPECT_EQ(ranks[2].host, "");
  roster.Wait({2}, "y", absl::Seconds(30), Into(&b), never_);
  roster.Complete();
  roster.Depart(0);
  ranks = roster.Describe();
  EXPECT_EQ(ranks[2].rank, 2);
  EXPECT_EQ(ranks[2].local_rank, 0);
  EXPECT_EQ(ranks[2].cross_rank, 1);
  EXPECT_EQ(ranks[1].local_rank, 1);
  EXPECT_TRUE(ranks[0].departed);
  EXPECT_FALSE(ranks[1].departed);
  EXPECT_FALSE(ranks[1].connected) << "Sessions' to say";
}

TEST_F(RosterTest, DepartedRanksAreCountedOnce) {
  Roster roster("j", 2, 1, scheduler_);
  EXPECT_TRUE(roster.Depart(1));
  EXPECT_FALSE(roster.Depart(1));
  EXPECT_TRUE(roster.departed(1));
  EXPECT_FALSE(roster.all_departed());
  EXPECT_TRUE(roster.Depart(0));
  EXPECT_TRUE(roster.all_departed());
}

}  // namespace
}  // namespace troika::coordinator
