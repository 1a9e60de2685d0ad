// Sessions on its own: binding and ownership, numbering of broadcast responses, settings, and
// the resumption of every session after a coordinator restart (replay asked of the most
// advanced one); a late session of the generation before (sent the change).

#include "coordinator/job/sessions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::FakeSink;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Response Named(const std::string& name) {
  Response r;
  r.names = {name};
  return r;
}

TEST(SessionsTest, BindsRanksOnceAndChecksOwnership) {
  Sessions sessions("j", 3, {});
  FakeSink a, b;
  ASSERT_TRUE(sessions.CanOpen().ok());
  ASSERT_TRUE(sessions.Open({0, 1}, &a, {}).ok());
  EXPECT_TRUE(sessions.Owns(&a, 1));
  EXPECT_FALSE(sessions.Owns(&b, 1));
  EXPECT_FALSE(sessions.Owns(&a, 3)) << "out of range";
  EXPECT_FALSE(sessions.Owns(&a, -1));
  EXPECT_TRUE(sessions.CheckOwns(&a, {0, 1}, "a goodbye").ok());
  absl::Status denied = sessions.CheckOwns(&a, {1, 2}, "a goodbye");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "a session sent a goodbye for rank 2, which it does not own");
  EXPECT_EQ(sessions.Open({1}, &b, {}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(sessions.Open({2}, &b, {2}).code(), absl::StatusCode::kAlreadyExists)
      << "a departed rank";
  EXPECT_EQ(sessions.Open({3}, &b, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sessions.Open({}, &b, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(sessions.all_connected());
  ASSERT_TRUE(sessions.Open({2}, &b, {}).ok());
  EXPECT_TRUE(sessions.all_connected());
  EXPECT_THAT(sessions.Close(&a), ElementsAre(0, 1));
  EXPECT_FALSE(sessions.connected(0));
  EXPECT_TRUE(sessions.Close(&a).empty()) << "closed twice";
  EXPECT_FALSE(sessions.empty());
  sessions.Close(&b);
  EXPECT_TRUE(sessions.empty());
}

TEST(SessionsTest, ALateSessionOfTheGenerationBeforeIsSentTheChangeAndOwnsNoRank) {
  // Which sessions follow is session::Followers' rule (tests/common/followers_test.cc); here,
  // how Sessions serves one.
  Sessions sessions("j", 2, {});
  FakeSink late;
  auto change = std::make_shared<DownMessage>();
  change->abort_reason = "membership of job 'j' changed: ...";
  change->membership_change = MembershipChange{};
  change->membership_change->epoch = 2;
  sessions.Follows(change, 1);
  ASSERT_TRUE(sessions.OpenFollower(&late, 1));
  ASSERT_EQ(late.messages().size(), 1u);
  EXPECT_EQ(late.messages()[0].abort_reason, change->abort_reason);
  EXPECT_TRUE(sessions.Following(&late));
  EXPECT_FALSE(sessions.Owns(&late, 0));
  EXPECT_TRUE(sessions.empty()) << "binds no rank";
  sessions.Broadcast(std::make_shared<DownMessage>());
  EXPECT_EQ(late.messages().size(), 1u) << "the generation's broadcasts are not for it";
  EXPECT_THAT(sessions.Close(&late), ElementsAre());
  EXPECT_FALSE(sessions.Following(&late));
}

TEST(SessionsTest, ResponsesAreNumberedInBroadcastOrder) {
  Sessions sessions("j", 2, {});
  FakeSink a, b;
  ASSERT_TRUE(sessions.Open({0}, &a, {}).ok());
  ASSERT_TRUE(sessions.Open({1}, &b, {}).ok());
  auto first = std::make_shared<DownMessage>();
  first->responses = {Named("x"), Named("y")};
  sessions.BroadcastResponses(first);
  auto second = std::make_shared<DownMessage>();
  second->responses = {Named("z")};
  sessions.BroadcastResponses(second);
  for (FakeSink* sink : {&a, &b}) {
    ASSERT_EQ(sink->messages().size(), 2u);
    EXPECT_EQ(sink->messages()[0].seq, 1);
    EXPECT_EQ(sink->messages()[1].seq, 3);
  }
}

TEST(SessionsTest, SettingsGoToNewSessionsAndChangesToEveryOne) {
  ClientSettings settings;
  settings.report_interval_ms = 100;
  Sessions sessions("j", 2, settings);
  FakeSink a, b;
  ASSERT_TRUE(sessions.Open({0}, &a, {}).ok());
  ASSERT_EQ(a.messages().size(), 1u);
  EXPECT_EQ(a.messages()[0].settings, settings);
  sessions.UpdateSettings(settings);
  EXPECT_EQ(a.messages().size(), 1u) << "unchanged settings are not sent again";
  settings.report_phases = true;
  sessions.UpdateSettings(settings);
  ASSERT_EQ(a.messages().size(), 2u);
  EXPECT_EQ(a.messages()[1].settings, settings);
  ASSERT_TRUE(sessions.Open({1}, &b, {}).ok());
  ASSERT_EQ(b.messages().size(), 1u);
  EXPECT_EQ(b.messages()[0].settings, settings);

  Sessions plain("k", 1, {});
  FakeSink c;
  ASSERT_TRUE(plain.Open({0}, &c, {}).ok());
  EXPECT_TRUE(c.messages().empty()) << "default settings are not sent";
}

TEST(SessionsTest, NewAndResumedSessionsDoNotMix) {
  Sessions fresh("j", 2, {});
  FakeSink a, b;
  ASSERT_TRUE(fresh.Open({0}, &a, {}).ok());
  EXPECT_THAT(fresh.CanResume({}).message(), HasSubstr("its sessions are new"));

  Sessions resuming("k", 2, {});
  ASSERT_TRUE(resuming.CanResume({}).ok());
  ASSERT_TRUE(resuming.Resume({0}, {}, &a, {}).ok());
  EXPECT_TRUE(resuming.resyncing());
  EXPECT_THAT(resuming.CanOpen().message(), HasSubstr("resuming after a coordinator restart"));
  SessionResume negative;
  negative.received = -1;
  EXPECT_EQ(resuming.CanResume(negative).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SessionsTest, ResumesAtOnceWhenEverySessionReceivedTheSame) {
  Sessions sessions("j", 2, {});
  FakeSink a, b;
  SessionResume resume;
  resume.received = 7;
  resume.max_cache_id = 4;
  resume.max_schedule_id = 2;
  ASSERT_TRUE(sessions.Resume({0}, resume, &a, {}).ok());
  EXPECT_FALSE(sessions.Resync().has_value()) << "rank 1 has not resumed yet";
  resume.max_cache_id = 9;
  ASSERT_TRUE(sessions.Resume({1}, resume, &b, {}).ok());
  std::optional<Sessions::Resumed> resumed = sessions.Resync();
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->through, 7);
  EXPECT_EQ(resumed->max_cache_id, 9);
  EXPECT_EQ(resumed->max_schedule_id, 2);
  EXPECT_FALSE(sessions.resyncing());
  for (FakeSink* sink : {&a, &b}) {
    ASSERT_EQ(sink->messages().size(), 1u);
    EXPECT_TRUE(sink->messages()[0].resumed);
  }
  EXPECT_THAT(sessions.CanResume({}).message(), HasSubstr("resumed already"));
  auto next = std::make_shared<DownMessage>();
  next->responses = {Named("x")};
  sessions.BroadcastResponses(next);
  EXPECT_EQ(a.messages().back().seq, 8) << "numbering goes on after what was received";
}

TEST(SessionsTest, MissedResponsesAreReplayedFromTheMostAdvancedSession) {
  Sessions sessions("j", 3, {});
  FakeSink a, b, c;
  SessionResume resume;
  resume.received = 5;
  ASSERT_TRUE(sessions.Resume({0}, resume, &a, {}).ok());
  resume.received = 3;
  ASSERT_TRUE(sessions.Resume({1}, resume, &b, {}).ok());
  resume.received = 4;
  ASSERT_TRUE(sessions.Resume({2}, resume, &c, {}).ok());
  EXPECT_FALSE(sessions.Resync().has_value()) << "a replay is asked for";
  ASSERT_EQ(a.messages().size(), 1u);
  EXPECT_EQ(a.messages()[0].replay_from, 4);
  EXPECT_EQ(a.messages()[0].replay_to, 5);
  EXPECT_TRUE(sessions.AwaitsReplay(&a));
  EXPECT_FALSE(sessions.AwaitsReplay(&b));

  absl::StatusOr<Sessions::Resumed> resumed = sessions.Replay(4, {Named("r4"), Named("r5")});
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->through, 5);
  // b missed 4 and 5, c only 5; then everyone is told `resumed`.
  ASSERT_EQ(b.messages().size(), 2u);
  EXPECT_EQ(b.messages()[0].seq, 4);
  ASSERT_EQ(b.messages()[0].responses.size(), 2u);
  EXPECT_EQ(b.messages()[0].responses[0].names.front(), "r4");
  ASSERT_EQ(c.messages().size(), 2u);
  EXPECT_EQ(c.messages()[0].seq, 5);
  ASSERT_EQ(c.messages()[0].responses.size(), 1u);
  EXPECT_EQ(c.messages()[0].responses[0].names.front(), "r5");
  for (FakeSink* sink : {&a, &b, &c}) EXPECT_TRUE(sink->messages().back().resumed);
}

TEST(SessionsTest, AReplayThatIsNotWhatWasAskedFails) {
  Sessions sessions("j", 2, {});
  FakeSink a, b;
  SessionResume resume;
  resume.received = 2;
  ASSERT_TRUE(sessions.Resume({0}, resume, &a, {}).ok());
  resume.received = 0;
  ASSERT_TRUE(sessions.Resume({1}, resume, &b, {}).ok());
  EXPECT_FALSE(sessions.Resync().has_value());
  absl::StatusOr<Sessions::Resumed> resumed = sessions.Replay(2, {Named("r2")});
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resumed.status().message(), HasSubstr("responses 1 to 2"));
}

}  // namespace
}  // namespace troika::coordinator
