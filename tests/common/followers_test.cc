// session::Followers: the one rule by which the coordinator's job (Sessions) and the agent's
// relay (NodeRelay) serve a late session of an elastic generation that ended.

#include "common/session/followers.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace troika::session {
namespace {

class RecordingSink : public SessionSink {
 public:
  void Send(std::shared_ptr<const DownMessage> message) override {
    sent.push_back(std::move(message));
  }
  std::vector<std::shared_ptr<const DownMessage>> sent;
};

std::shared_ptr<const DownMessage> Change(int64_t next_epoch) {
  auto change = std::make_shared<DownMessage>();
  change->abort_reason = "membership of job 'j' changed: rank 2 exited";
  change->membership_change = MembershipChange{};
  change->membership_change->epoch = next_epoch;
  return change;
}

TEST(FollowersTest, NothingFollowsBeforeAChange) {
  Followers followers;
  RecordingSink sink;
  EXPECT_FALSE(followers.Open(&sink, 1));
  EXPECT_FALSE(followers.contains(&sink));
  EXPECT_TRUE(sink.sent.empty());
}

TEST(FollowersTest, ASessionOfTheEndedGenerationIsSentTheChangeUntilItCloses) {
  Followers followers;
  const auto change = Change(3);
  followers.Follow(change, 2);
  RecordingSink late;
  ASSERT_TRUE(followers.Open(&late, 2));
  ASSERT_EQ(late.sent.size(), 1u);
  EXPECT_EQ(late.sent[0], change) << "the ended generation's own message, not a copy";
  EXPECT_TRUE(followers.contains(&late));
  EXPECT_TRUE(followers.Close(&late));
  EXPECT_FALSE(followers.contains(&late));
  EXPECT_FALSE(followers.Close(&late)) << "closed once";
}

// A session of an older generation would read the change's renumbering as its own; one of the
// new generation is no follower: both are left to the owner's checks.
TEST(FollowersTest, OnlyTheEndedGenerationsSessionsFollow) {
  Followers followers;
  followers.Follow(Change(5), 4);
  RecordingSink older, newer;
  EXPECT_FALSE(followers.Open(&older, 3));
  EXPECT_FALSE(followers.Open(&newer, 5));
  EXPECT_TRUE(older.sent.empty());
  EXPECT_TRUE(newer.sent.empty());
  EXPECT_FALSE(followers.contains(&older));
}

}  // namespace
}  // namespace troika::session
