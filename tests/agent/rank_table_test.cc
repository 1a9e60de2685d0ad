// RankTable: a node's ranks renumbered generation by generation, the ones left behind, exits
// carried to the next generation, and restarts (budget, join ids, admission, rejoining).

#include "agent/node/rank_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

// Ranks 4..7 of a job of 8 ranks on two nodes of 4.
RankTable Node(int max_restarts = 0) {
  RankTable table;
  table.Start({4, 5, 6, 7}, max_restarts, 1);
  return table;
}

// Generation `epoch` of `size` ranks: rank r of the one that ended becomes next[r].
MembershipChange Change(int64_t epoch, int size, std::vector<int> next) {
  MembershipChange change;
  change.epoch = epoch;
  change.size = size;
  change.next_rank = std::move(next);
  return change;
}

TEST(RankTableTest, AChangeRenumbersTheSurvivorsAndRemembersWhoWasLeftBehind) {
  RankTable table = Node();
  EXPECT_THAT(table.LiveRanks(), ElementsAre(4, 5, 6, 7));
  // Ranks 1 and 5 are lost: 0 2 3 4 6 7 become 0..5.
  const MembershipChange change = Change(2, 6, {0, -1, 1, 2, 3, -1, 4, 5});
  EXPECT_TRUE(table.GoesOn(change));
  RankTable::Change next = table.Apply(change);
  EXPECT_THAT(next.live, ElementsAre(3, 4, 5));
  EXPECT_EQ(table.epoch(), 2);
  EXPECT_EQ(table.RankOf(1), -1);
  EXPECT_EQ(table.RankOf(2), 4);
  EXPECT_THAT(table.left(), ElementsAre(5)) << "labels, not numbers";
  EXPECT_THAT(next.restarted, IsEmpty());
}

TEST(RankTableTest, ANodeWithoutSurvivorsDoesNotGoOn) {
  RankTable table = Node();
  const MembershipChange change = Change(2, 4, {0, 1, 2, 3, -1, -1, -1, -1});
  EXPECT_FALSE(table.GoesOn(change));
  EXPECT_FALSE(table.LiveAfter(change));
  EXPECT_THAT(table.Apply(change).live, IsEmpty());
  EXPECT_THAT(table.left(), ElementsAre(4, 5, 6, 7));
}

TEST(RankTableTest, ExitsOfRanksTheChangeKeepsAreCarriedUnderTheirNewNumbers) {
  RankTable table = Node();
  table.RecordExit(0, ExitStatus{0, 0});  // rank 4 finished
  table.RecordExit(1, ExitStatus{1, 0});  // rank 5 failed: the change drops it
  RankTable::Change next = table.Apply(Change(2, 7, {0, 1, 2, 3, 4, -1, 5, 6}));
  ASSERT_EQ(next.exited.size(), 1u);
  EXPECT_EQ(next.exited[0].first, 4);
  EXPECT_EQ(next.exited[0].second.code, 0);
  EXPECT_THAT(table.ExitsByLabel(), ElementsAre(Pair(4, testing::_), Pair(5, testing::_)));
  table.ForgetExit(0);
  EXPECT_THAT(table.ExitsByLabel(), ElementsAre(Pair(5, testing::_)));
}

TEST(RankTableTest, RestartsAreCountedForTheWholeNodeAndNamedByJoinIds) {
  RankTable table = Node(/*max_restarts=*/2);
  std::optional<RankTable::Restart> first = table.TakeRestart(1, "host/42");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->join_id, "host/42/5/1");
  EXPECT_EQ(first->left, 1);
  ASSERT_TRUE(table.TakeRestart(2, "host/42").has_value());
  EXPECT_FALSE(table.TakeRestart(3, "host/42").has_value()) << "the budget is spent";
  EXPECT_TRUE(table.Restarting(1));
  EXPECT_FALSE(table.Restarting(3));
}

TEST(RankTableTest, AFailedRankRegistersOnceDroppedAndStartsAgainWhenAdmitted) {
  RankTable table = Node(/*max_restarts=*/1);
  const std::string join_id = table.TakeRestart(1, "host/42")->join_id;
  // The change that drops it: now it registers to rejoin.
  RankTable::Change dropped = table.Apply(Change(2, 7, {0, 1, 2, 3, 4, -1, 5, 6}));
  EXPECT_THAT(dropped.to_register, ElementsAre(Pair(1, join_id)));
  EXPECT_TRUE(table.Restarting(1));
  // A later change admits it, at rank 7: it is live again, and not left behind.
  MembershipChange admits = Change(3, 8, {0, 1, 2, 3, 4, 5, 6});
  admits.admitted.push_back({join_id, 7});
  EXPECT_TRUE(table.LiveAfter(admits));
  RankTable::Change next = table.Apply(admits);
  EXPECT_THAT(next.restarted, ElementsAre(Pair(1, 7)));
  EXPECT_THAT(next.to_register, IsEmpty()) << "registered once only";
  EXPECT_THAT(next.live, ElementsAre(4, 7, 5, 6));
  EXPECT_FALSE(table.Restarting(1));
  EXPECT_THAT(table.left(), IsEmpty());
}

TEST(RankTableTest, ANodeWithNoRankLeftRejoinsWithEveryRestartingRankTheBlockAdmits) {
  RankTable table = Node(/*max_restarts=*/4);
  const std::string a = table.TakeRestart(0, "h")->join_id;
  const std::string b = table.TakeRestart(2, "h")->join_id;
  table.Apply(Change(2, 4, {0, 1, 2, 3, -1, -1, -1, -1}));  // the whole node is dropped
  std::vector<std::pair<int, int>> rejoined = table.Rejoin(2, 5, {{a, 4}, {b, 5}}, 3);
  EXPECT_THAT(rejoined, ElementsAre(Pair(2, 5), Pair(0, 4)));
  EXPECT_THAT(table.LiveRanks(), ElementsAre(4, 5));
  EXPECT_EQ(table.epoch(), 3);
  EXPECT_THAT(table.left(), ElementsAre(5, 7));
  EXPECT_THAT(table.Rejoin(2, 5, {}, 4), IsEmpty()) << "not restarting any more";
  table.DropRestart(0);
  EXPECT_FALSE(table.Restarting(0));
}

}  // namespace
}  // namespace troika::agent
