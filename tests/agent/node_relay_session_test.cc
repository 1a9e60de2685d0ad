// NodeRelay: the ranks' sessions and processes (what reaches them, aborts, goodbyes, exits,
// lost sessions, the checks on a session, a late one of an ended generation).

#include <memory>
#include <string>
#include <vector>

#include "agent/relay/node_relay.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/node_relay_test_util.h"

namespace troika::agent {
namespace {

using test_util::NodeRelayTest;
using test_util::Request;
using ::testing::ElementsAre;

TEST_F(NodeRelayTest, DownMessagesReachEveryLocalSession) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  auto down = std::make_shared<DownMessage>();
  down->responses.resize(1);
  relay->Deliver(down);
  ASSERT_EQ(sink2_.messages().size(), 1u);
  ASSERT_EQ(sink3_.messages().size(), 1u);
  EXPECT_EQ(sink2_.messages()[0], down) << "one message, shared";
  EXPECT_EQ(sink3_.messages()[0], down);
}

TEST_F(NodeRelayTest, AbortReachesEverySessionAndLaterOnesAndEndsForwarding) {
  auto relay = MakeRelay();
  ASSERT_TRUE(relay->OpenSession({2}, 1, &sink2_).ok());
  auto abort = std::make_shared<DownMessage>();
  abort->abort_reason = "job 'train' aborted: rank 0 on node-a exited with code 1";
  relay->Deliver(abort);
  EXPECT_TRUE(relay->aborted());
  ASSERT_TRUE(relay->OpenSession({3}, 1, &sink3_).ok());
  ASSERT_EQ(sink3_.messages().size(), 1u);
  EXPECT_EQ(sink3_.messages()[0]->abort_reason, abort->abort_reason);
  EXPECT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());
  relay->ProcessExited(3, 1, 0);
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty()) << "the job is over";
}

// A rank that exits while its node attaches (an elastic job's next generation: the upstream
// has no session then and takes nothing) is reported once the node is attached.
TEST_F(NodeRelayTest, AnExitBeforeTheNodeIsAttachedGoesUpOnceItIs) {
  NodeRelayOptions options;
  options.size = 4;
  options.ranks = {2, 3};
  options.host = "node-b";
  auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
  relay->ProcessExited(3, 0, 9);
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  relay->Attached(2);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 3 code 0 signal 9 on node-b"));
}

TEST_F(NodeRelayTest, GoodbyeGoesUpstreamAfterTheRanksWaitingRequests) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  ASSERT_TRUE(relay->Submit(&sink2_, {Request(2, "grad")}).ok());
  ASSERT_TRUE(relay->Goodbye(&sink2_, {2}).ok());
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests grad:2", "goodbye 2"));
  ASSERT_TRUE(relay->Submit(&sink3_, {Request(3, "next")}).ok());
  EXPECT_THAT(upstream_.sent().back(), "requests next:3") << "rank 3 is the only live rank";
  relay->CloseSession(&sink2_, absl::OkStatus());
  relay->ProcessExited(2, 0, 0);
  // Only that its process is gone: it left cleanly, and will not attach again (a job that
  // forms anew cannot wait for it).
  EXPECT_THAT(upstream_.sent(), ElementsAre("requests grad:2", "goodbye 2", "requests next:3",
                                            "exit 2 code 0 signal 0 on node-b"));
  relay->ProcessExited(2, 0, 0);
  EXPECT_EQ(upstream_.sent().size(), 4u) << "once";
}

TEST_F(NodeRelayTest, RanksThatSaidGoodbyeHaveLeftAndTheirFailureAfterwardsIsReported) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  EXPECT_FALSE(relay->Left({2}));
  ASSERT_TRUE(relay->Goodbye(&sink2_, {2}).ok());
  EXPECT_TRUE(relay->Left({2}));
  EXPECT_FALSE(relay->Left({2, 3})) << "rank 3 has not";
  EXPECT_FALSE(relay->Left({7})) << "not this node's";
  relay->CloseSession(&sink2_, absl::OkStatus());
  relay->ProcessExited(2, 3, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("goodbye 2", "exit 2 code 3 signal 0 on node-b"));
}

TEST_F(NodeRelayTest, SessionTheRelayEndedIsReportedWithTheVerdictAtOnce) {
  auto relay = MakeRelay();  // an hour of grace: only the verdict can report it now
  OpenBoth(*relay);
  relay->CloseSession(&sink2_, absl::InvalidArgumentError("negative dimension"));
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 2 code -1 signal 0 on node-b"));
  ASSERT_EQ(upstream_.exits().size(), 1u);
  EXPECT_EQ(upstream_.exits()[0].reason, "negative dimension");
  relay->ProcessExited(2, 0, 0);  // its later exit, cleanly or not, adds nothing
  EXPECT_EQ(upstream_.sent().size(), 1u);
}

TEST_F(NodeRelayTest, SessionOpeningLaterGetsTheCoordinatorsLatestSettings) {
  auto relay = MakeRelay();
  auto down = std::make_shared<DownMessage>();
  down->settings = ClientSettings{50, true};
  relay->Deliver(down);  // before any local session
  ASSERT_TRUE(relay->OpenSession({2}, 1, &sink2_).ok());
  ASSERT_EQ(sink2_.messages().size(), 1u);
  ASSERT_TRUE(sink2_.messages()[0]->settings.has_value());
  EXPECT_EQ(*sink2_.messages()[0]->settings, (ClientSettings{50, true}));
}

TEST_F(NodeRelayTest, FailingProcessIsReportedAtOnceWithItsExitStatus) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  relay->ProcessExited(3, 0, 9);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 3 code 0 signal 9 on node-b"));
  relay->CloseSession(&sink3_, absl::OkStatus());
  EXPECT_EQ(upstream_.sent().size(), 1u);
}

TEST_F(NodeRelayTest, ProcessExitingZeroWithoutGoodbyeLeavesCleanly) {
  auto relay = MakeRelay();
  OpenBoth(*relay);
  relay->ProcessExited(2, 0, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("goodbye 2"));
}

TEST_F(NodeRelayTest, ProcessExitingZeroBeforeItsSessionIsReportedAsAnExit) {
  // It never joined: the coordinator must hear that it exited, so the ranks waiting for it
  // to connect fail at once instead of waiting out their timeout.
  auto relay = MakeRelay();
  relay->ProcessExited(2, 0, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 2 code 0 signal 0 on node-b"));
}

TEST_F(NodeRelayTest, SessionEndingWithoutGoodbyeAwaitsTheExitReport) {
  auto relay = MakeRelay();  // an hour of grace: only the exit report can come
  OpenBoth(*relay);
  relay->CloseSession(&sink2_, absl::OkStatus());
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
  relay->ProcessExited(2, 3, 0);
  EXPECT_THAT(upstream_.sent(), ElementsAre("exit 2 code 3 signal 0 on node-b"));
}

TEST_F(NodeRelayTest, SessionEndingWithoutGoodbyeWhileTheProcessLivesIsReportedLost) {
  auto relay = MakeRelay(absl::Milliseconds(20));
  OpenBoth(*relay);
  std::future<std::string> next = upstream_.Next();
  relay->CloseSession(&sink3_, absl::OkStatus());
  ASSERT_EQ(next.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(next.get(), "exit 3 code -1 signal 0 on node-b");
  relay->ProcessExited(3, 0, 15);
  EXPECT_EQ(upstream_.sent().size(), 1u) << "reported once";
}

// A rank that attached for generation 2, whose session reaches the agent after the job went
// on as generation 3 (the relay of generation 3 is in force, not attached yet): it is sent the
// change that ended generation 2, as that generation's sessions were, not refused UNAVAILABLE
// (which the rank would take for a lost agent and fail).
TEST_F(NodeRelayTest, ALateSessionOfTheEndedGenerationIsSentTheChange) {
  NodeRelayOptions options;
  options.size = 3;
  options.ranks = {0, 1};
  auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
  auto change = std::make_shared<DownMessage>();
  change->abort_reason = "membership of job 'train' changed: rank 2 exited";
  change->membership_change = MembershipChange{};
  change->membership_change->epoch = 3;
  change->membership_change->size = 3;
  relay->Follows(change, 2);
  ASSERT_TRUE(relay->OpenSession({0}, 2, &sink2_).ok());
  ASSERT_EQ(sink2_.messages().size(), 1u);
  EXPECT_EQ(sink2_.messages()[0], change);
  // It is bound to no rank: what it sends is void, as at the coordinator (not refused, which
  // would end its stream with an error after the change).
  EXPECT_TRUE(relay->Submit(&sink2_, {Request(0, "x")}).ok());
  EXPECT_TRUE(relay->ReportWaitState(&sink2_, WaitState{.rank = 0, .waiting_for = {}}).ok());
  EXPECT_TRUE(relay->ReportExit(&sink2_, RankExit{0, "node-b", 1, 0, "failed"}).ok());
  EXPECT_TRUE(relay->Goodbye(&sink2_, {0}).ok());
  EXPECT_TRUE(relay->EndSchedule(&sink2_, 1, {0}).ok());
  EXPECT_TRUE(absl::IsUnavailable(relay->OpenSession({0}, 3, &sink3_)))
      << "generation 3's own sessions wait for the relay to attach";
  relay->Attached(3);
  ASSERT_TRUE(relay->OpenSession({0}, 3, &sink3_).ok()) << "rank 0 is not taken by the late one";
  EXPECT_TRUE(sink3_.messages().empty());
  EXPECT_TRUE(upstream_.sent().empty()) << "nothing of the late session went upstream";
  EXPECT_EQ(relay->counts().requests_received, 0);
  // Once closed, its sink is no follower: a session at the same address would be served.
  relay->CloseSession(&sink2_, absl::OkStatus());
  EXPECT_TRUE(absl::IsPermissionDenied(relay->Submit(&sink2_, {Request(0, "y")})));
}

TEST_F(NodeRelayTest, SessionsAreCheckedLikeTheCoordinatorChecksThem) {
  NodeRelayOptions options;
  options.size = 4;
  options.ranks = {2, 3};
  auto relay = std::make_shared<NodeRelay>(options, upstream_, scheduler_, clock_);
  EXPECT_TRUE(absl::IsUnavailable(relay->OpenSession({2}, 1, &sink2_))) << "not attached yet";
  relay->Attached(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(relay->OpenSession({2}, 7, &sink2_)));
  EXPECT_TRUE(absl::IsPermissionDenied(relay->OpenSession({1}, 1, &sink2_)));
  ASSERT_TRUE(relay->OpenSession({2}, 1, &sink2_).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(relay->OpenSession({2}, 1, &sink3_)));
  EXPECT_TRUE(absl::IsPermissionDenied(relay->Submit(&sink2_, {Request(3, "x")})));
  TensorRequest bad = Request(2, "bad");
  bad.shape = {-1};
  EXPECT_TRUE(absl::IsInvalidArgument(relay->Submit(&sink2_, {bad})));
  EXPECT_TRUE(absl::IsPermissionDenied(relay->Goodbye(&sink2_, {3})));
  EXPECT_THAT(upstream_.sent(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace troika::agent
