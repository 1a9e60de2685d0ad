// ChangeSince: how a troika-agent renumbers a rank that attaches for a generation of its
// elastic job that has already ended (docs/elastic.md).

#include "agent/service/agent_service.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::agent {
namespace {

using ::testing::ElementsAre;

MembershipChange Change(int64_t epoch, std::vector<int> next_rank, bool at_commit = false) {
  MembershipChange c;
  c.epoch = epoch;
  c.next_rank = std::move(next_rank);
  for (int r : c.next_rank) c.size += r >= 0;
  c.at_commit = at_commit;
  return c;
}

// Generation 1 of 4 ranks loses rank 2 (generation 2: 0, 1, 3 -> 0, 1, 2), then rank 0
// (generation 3), then admits a node of 2 at a commit (generation 4 of 4).
std::vector<MembershipChange> History() {
  MembershipChange joined = Change(4, {0, 1}, /*at_commit=*/true);
  joined.size = 4;
  joined.joined = 2;
  joined.admitted.push_back({"node-c/1", 2});
  return {Change(2, {0, 1, -1, 2}), Change(3, {-1, 0, 1}), joined};
}

TEST(ChangeSinceTest, ComposesEveryChangeSinceTheRanksGeneration) {
  std::optional<MembershipChange> since1 = ChangeSince(History(), 1);
  ASSERT_TRUE(since1.has_value());
  EXPECT_EQ(since1->epoch, 4);
  EXPECT_EQ(since1->size, 4);
  EXPECT_THAT(since1->next_rank, ElementsAre(-1, 0, -1, 1));
  // The rank ran none of the generations between: nothing of the commit that admitted the
  // node applies to it (it goes back to its own last commit).
  EXPECT_FALSE(since1->at_commit);
  EXPECT_EQ(since1->joined, 0);
  EXPECT_TRUE(since1->admitted.empty());

  std::optional<MembershipChange> since2 = ChangeSince(History(), 2);
  ASSERT_TRUE(since2.has_value());
  EXPECT_EQ(since2->epoch, 4);
  EXPECT_THAT(since2->next_rank, ElementsAre(-1, 0, 1));
}

TEST(ChangeSinceTest, NoneForTheGenerationInForceOrAGapInTheHistory) {
  EXPECT_FALSE(ChangeSince(History(), 4).has_value()) << "in force";
  EXPECT_FALSE(ChangeSince(History(), 7).has_value()) << "unknown here";
  EXPECT_FALSE(ChangeSince({}, 1).has_value());
  std::vector<MembershipChange> gap = {Change(2, {0, 1, 2, -1}), Change(4, {0, 1, -1})};
  EXPECT_FALSE(ChangeSince(gap, 1).has_value()) << "generation 3's change is missing";
}

}  // namespace
}  // namespace troika::agent
