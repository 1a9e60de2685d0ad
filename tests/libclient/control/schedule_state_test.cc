// ScheduleState: where each submission goes with and without a schedule in force, what a
// schedule that begins takes over, when the rank deviates and whom it tells, what goes back
// to negotiation when the schedule ends and in which order, and what the sender is told.

#include "libclient/control/schedule_state.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troika::internal {
namespace {

TensorRequest Req(const std::string& name, int64_t elements = 4) {
  TensorRequest r;
  r.name = name;
  r.shape = {elements};
  return r;
}

TensorRequest Join() {
  TensorRequest r;
  r.name = "troika/join";
  r.type = CollectiveType::kJoin;
  return r;
}

Response Entry(std::vector<std::string> names, std::vector<int32_t> ids) {
  Response r;
  r.names = std::move(names);
  r.cache_ids = std::move(ids);
  return r;
}

// Schedule 7: entry 0 is [a, b] fused, entry 1 is [c].
Schedule TwoEntries() { return Schedule{7, {Entry({"a", "b"}, {1, 2}), Entry({"c"}, {3})}}; }
const std::map<std::string, TensorRequest> kExpected = {
    {"a", Req("a")}, {"b", Req("b")}, {"c", Req("c")}};

std::vector<std::string> Names(const std::vector<Submission>& submissions) {
  std::vector<std::string> names;
  for (const auto& [order, request] : submissions) names.push_back(request.name);
  return names;
}

class ScheduleStateTest : public ::testing::Test {
 protected:
  // What went to the executor: schedule, position, vote void.
  struct Enqueued {
    int64_t schedule;
    int64_t position;
    bool vote_void;
    bool wake;
  };

  // Submits `request` as the next submission; true if it is to be negotiated.
  bool Submit(TensorRequest request, bool wake = true) {
    return state_.Route(std::move(request), state_.NextOrder(), wake).has_value();
  }

  FakeClock clock_;
  std::vector<Enqueued> enqueued_;
  int sender_woken_ = 0;
  ScheduleState state_{clock_,
                       [this](int64_t schedule, ScheduledStep step, bool wake) {
                         enqueued_.push_back({schedule, step.position, step.vote_void, wake});
                       },
                       [this] { ++sender_woken_; }};
};

TEST_F(ScheduleStateTest, WithNoScheduleEverySubmissionIsNegotiated) {
  std::optional<TensorRequest> sent = state_.Route(Req("a"), state_.NextOrder());
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->name, "a");
  EXPECT_EQ(state_.Match(Req("a")), -1);
  EXPECT_FALSE(state_.in_force());
  EXPECT_FALSE(state_.has_notices());
  EXPECT_TRUE(enqueued_.empty());
}

TEST_F(ScheduleStateTest, AScheduleTakesOverTheUnansweredRequestsItNamesAndRunsTheReadyEntry) {
  EXPECT_TRUE(Submit(Req("a")));
  EXPECT_TRUE(Submit(Req("b")));
  auto absorbed = state_.Begin(TwoEntries(), kExpected);
  ASSERT_TRUE(absorbed.ok()) << absorbed.status();
  EXPECT_EQ(*absorbed, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(enqueued_.size(), 1u) << "entry 0 has every tensor: it runs";
  EXPECT_EQ(enqueued_[0].schedule, 7);
  EXPECT_EQ(enqueued_[0].position, 0);
  EXPECT_FALSE(enqueued_[0].vote_void);
  EXPECT_TRUE(state_.reporting());
  EXPECT_FALSE(state_.has_notices());
  // The next submission of c is the schedule's, not negotiated.
  EXPECT_FALSE(Submit(Req("c"), /*wake=*/false));
  ASSERT_EQ(enqueued_.size(), 2u);
  EXPECT_EQ(enqueued_[1].position, 1);
  EXPECT_FALSE(enqueued_[1].wake) << "the caller runs it itself";
}

TEST_F(ScheduleStateTest, AnsweredRequestsAreNotTakenOver) {
  EXPECT_TRUE(Submit(Req("a")));
  Response response;
  response.names = {"a"};
  state_.Answered({response});
  auto absorbed = state_.Begin(TwoEntries(), kExpected);
  ASSERT_TRUE(absorbed.ok());
  EXPECT_TRUE(absorbed->empty());
  EXPECT_TRUE(enqueued_.empty());
  EXPECT_TRUE(state_.reporting()) << "nothing unanswered: no deviation";
}

TEST_F(ScheduleStateTest, MatchAndTakeRunAnEntryOnceItIsComplete) {
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  EXPECT_EQ(state_.Match(Req("a", 5)), -1) << "another shape is not the schedule's";
  const int a = state_.Match(Req("a"));
  ASSERT_GE(a, 0);
  state_.Take(a, true);
  EXPECT_TRUE(enqueued_.empty());
  const int b = state_.Match(Req("b"));
  ASSERT_GE(b, 0);
  state_.Take(b, true);
  ASSERT_EQ(enqueued_.size(), 1u);
  EXPECT_EQ(enqueued_[0].position, 0);
}

TEST_F(ScheduleStateTest, ATensorThatRunsAloneIsTakenToRunAndWhatIsReadyAfterItIsQueued) {
  // Entry 0 is [a], entry 1 is [b], entry 2 is [c]: c is submitted before b.
  ASSERT_TRUE(
      state_
          .Begin(Schedule{7, {Entry({"a"}, {1}), Entry({"b"}, {2}), Entry({"c"}, {3})}}, kExpected)
          .ok());
  const int a = state_.Match(Req("a")), b = state_.Match(Req("b")), c = state_.Match(Req("c"));
  ASSERT_TRUE(state_.RunsAlone(a));
  EXPECT_FALSE(state_.RunsAlone(b)) << "entry 0 is next";
  auto [schedule, step] = state_.TakeToRun(a);
  EXPECT_EQ(schedule, 7);
  EXPECT_EQ(step.position, 0);
  EXPECT_EQ(step.response->names, std::vector<std::string>{"a"});
  EXPECT_TRUE(enqueued_.empty()) << "the caller runs it";
  state_.Take(c, true);
  EXPECT_TRUE(enqueued_.empty()) << "entry 2 waits for entry 1";
  ASSERT_TRUE(state_.RunsAlone(b));
  auto [again, first] = state_.TakeToRun(b);
  EXPECT_EQ(first.position, 1);
  ASSERT_EQ(enqueued_.size(), 1u) << "entry 2 is ready after it";
  EXPECT_EQ(enqueued_[0].position, 2);
  EXPECT_FALSE(enqueued_[0].wake) << "it runs after the caller's, which holds the turn";
}

TEST_F(ScheduleStateTest, AnUnansweredRequestTheScheduleDoesNotNameIsADeviationToldOnce) {
  EXPECT_TRUE(Submit(Req("x")));
  EXPECT_TRUE(Submit(Req("a")));
  auto absorbed = state_.Begin(TwoEntries(), kExpected);
  ASSERT_TRUE(absorbed.ok());
  EXPECT_EQ(*absorbed, (std::vector<std::string>{"a"})) << "x stays negotiated";
  ASSERT_EQ(enqueued_.size(), 1u);
  EXPECT_TRUE(enqueued_[0].vote_void) << "the first entry not entered votes void";
  EXPECT_EQ(enqueued_[0].position, 0);
  EXPECT_EQ(sender_woken_, 1);
  EXPECT_FALSE(state_.reporting());
  EXPECT_TRUE(state_.in_force()) << "until the void vote ends it";
  ScheduleState::Notices notices = state_.TakeNotices(true);
  EXPECT_EQ(notices.deviated, 7);
  EXPECT_EQ(notices.ended, 0);
  EXPECT_TRUE(notices.progress.empty()) << "a rank that deviated reports no progress";
  EXPECT_FALSE(state_.has_notices());
  state_.Deviate();
  EXPECT_EQ(enqueued_.size(), 1u) << "a rank deviates once";
  EXPECT_EQ(state_.TakeNotices(true).deviated, 0);
}

TEST_F(ScheduleStateTest, AJoinSubmittedAfterATakenRequestIsTakenBackToo) {
  EXPECT_TRUE(Submit(Req("a")));  // order 0
  EXPECT_TRUE(Submit(Join()));    // order 1
  auto absorbed = state_.Begin(TwoEntries(), kExpected);
  ASSERT_TRUE(absorbed.ok());
  EXPECT_EQ(*absorbed, (std::vector<std::string>{"a", "troika/join"}));
  // The join is no tensor of the schedule: the rank deviates and holds it until the end, when
  // it is negotiated after a.
  std::optional<std::vector<Submission>> back = state_.Scheduled(7, 0, false);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(Names(*back), (std::vector<std::string>{"a", "troika/join"}));
}

TEST_F(ScheduleStateTest, AJoinSubmittedBeforeTheTakenRequestsStaysNegotiatedAndDeviates) {
  EXPECT_TRUE(Submit(Join()));    // order 0
  EXPECT_TRUE(Submit(Req("a")));  // order 1
  auto absorbed = state_.Begin(TwoEntries(), kExpected);
  ASSERT_TRUE(absorbed.ok());
  EXPECT_EQ(*absorbed, (std::vector<std::string>{"a"}));
  EXPECT_EQ(state_.TakeNotices(false).deviated, 7);
}

TEST_F(ScheduleStateTest, TheEndNegotiatesWhatWasTakenFromTheEndingEntryOnAndWhatWasHeld) {
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  EXPECT_FALSE(Submit(Req("a")));      // order 0, entry 0
  EXPECT_FALSE(Submit(Req("b")));      // order 1, entry 0: runs
  EXPECT_FALSE(Submit(Req("c")));      // order 2, entry 1: runs
  EXPECT_FALSE(Submit(Req("a")));      // order 3, entry 0 of round 1
  EXPECT_FALSE(Submit(Req("other")));  // order 4: deviates, held
  EXPECT_FALSE(Submit(Req("b")));      // order 5: held (the rank deviated)
  ASSERT_EQ(enqueued_.size(), 3u);
  EXPECT_TRUE(enqueued_[2].vote_void);
  EXPECT_EQ(enqueued_[2].position, 2);
  EXPECT_FALSE(state_.Scheduled(7, 0, true).has_value()) << "a completed entry ends nothing";
  EXPECT_FALSE(state_.Scheduled(6, 1, false).has_value()) << "not the schedule in force";
  clock_.Advance(absl::Seconds(3));
  // Entry 1 completed on the others but some rank voted void there: c and everything later.
  std::optional<std::vector<Submission>> back = state_.Scheduled(7, 1, false);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(Names(*back), (std::vector<std::string>{"c", "a", "other", "b"}));
  for (size_t i = 1; i < back->size(); ++i) {
    EXPECT_LT((*back)[i - 1].first, (*back)[i].first) << "in the order submitted";
  }
  EXPECT_FALSE(state_.in_force());
  EXPECT_TRUE(state_.has_notices());
  const absl::Time ended_at = clock_.Now();
  clock_.Advance(absl::Seconds(2));
  ScheduleState::Notices notices = state_.TakeNotices(false);
  EXPECT_EQ(notices.ended, 7);
  EXPECT_EQ(notices.deviated, 7);
  EXPECT_EQ(notices.at, ended_at) << "the progress is as of the end";
  EXPECT_EQ(notices.progress.schedule, 7) << "the ended schedule's last progress";
  EXPECT_FALSE(state_.has_notices());
  // Negotiated again from now on, and unanswered: a later schedule would take it over.
  EXPECT_TRUE(state_.Route((*back)[0].second, (*back)[0].first).has_value());
  auto absorbed = state_.Begin(Schedule{8, {Entry({"c"}, {3})}}, kExpected);
  ASSERT_TRUE(absorbed.ok());
  EXPECT_EQ(*absorbed, (std::vector<std::string>{"c"}));
}

TEST_F(ScheduleStateTest, TheCoordinatorsEndDeviatesWithoutTelling) {
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  state_.EndOrdered(6);
  EXPECT_TRUE(enqueued_.empty()) << "another schedule";
  state_.EndOrdered(7);
  ASSERT_EQ(enqueued_.size(), 1u);
  EXPECT_TRUE(enqueued_[0].vote_void);
  EXPECT_EQ(sender_woken_, 0);
  EXPECT_FALSE(state_.has_notices());
}

TEST_F(ScheduleStateTest, AWaitForATensorWhoseEntryCannotBeEnteredDeviates) {
  EXPECT_FALSE(state_.WaitDeviates("a")) << "no schedule";
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  EXPECT_FALSE(Submit(Req("a")));
  EXPECT_TRUE(state_.WaitDeviates("a")) << "entry 0 still misses b";
  EXPECT_FALSE(state_.WaitDeviates("c")) << "not submitted: nothing to wait for";
  EXPECT_FALSE(Submit(Req("b")));
  EXPECT_FALSE(state_.WaitDeviates("a")) << "entered";
}

TEST_F(ScheduleStateTest, BlockedInAnEntryForAQuarterOfTheDataTimeoutIsTooLong) {
  state_.LimitWaits(absl::Seconds(40));
  EXPECT_FALSE(state_.BlockedTooLong()) << "no schedule";
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  EXPECT_FALSE(Submit(Req("a")));
  EXPECT_FALSE(Submit(Req("b")));  // entry 0 entered now
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(state_.BlockedTooLong());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(state_.BlockedTooLong());
  state_.Scheduled(7, 0, true);
  EXPECT_FALSE(state_.BlockedTooLong()) << "completed";
}

TEST_F(ScheduleStateTest, TheWaitLimitIsThirtySecondsAtMost) {
  state_.LimitWaits(absl::Minutes(10));
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  EXPECT_FALSE(Submit(Req("a")));
  EXPECT_FALSE(Submit(Req("b")));
  clock_.Advance(kMaxScheduledWait - absl::Seconds(1));
  EXPECT_FALSE(state_.BlockedTooLong());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(state_.BlockedTooLong());
}

TEST_F(ScheduleStateTest, AReportTakesTheProgressOfTheScheduleInForce) {
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  EXPECT_FALSE(Submit(Req("a")));
  EXPECT_FALSE(Submit(Req("b")));
  EXPECT_FALSE(Submit(Req("c")));
  state_.Scheduled(7, 0, true);
  state_.Scheduled(7, 1, true);
  EXPECT_TRUE(state_.TakeNotices(false).progress.empty()) << "no report due";
  ScheduleState::Notices notices = state_.TakeNotices(true);
  EXPECT_EQ(notices.progress.schedule, 7);
  EXPECT_EQ(notices.progress.submitted_ago.size(), 3u) << "one round of three tensors";
  EXPECT_EQ(notices.at, clock_.Now());
  EXPECT_TRUE(state_.TakeNotices(true).progress.empty()) << "taken once";
}

TEST_F(ScheduleStateTest, CompletionsSeenBetweenSubmissionsAreRecorded) {
  WaitTracker waits(0, [](WaitState) {});
  state_.TrackWaits(&waits);
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  EXPECT_FALSE(Submit(Req("a")));
  waits.Observed();  // b may depend on a result: the two must not share a collective
  EXPECT_FALSE(Submit(Req("b")));
  EXPECT_FALSE(Submit(Req("c")));
  state_.Scheduled(7, 0, true);
  state_.Scheduled(7, 1, true);
  EXPECT_EQ(state_.TakeNotices(true).progress.cut_after, (std::vector<int32_t>{0}));
}

TEST_F(ScheduleStateTest, AScheduleWhileOneIsInForceOrNamingAnUnknownIdIsRefused) {
  std::map<std::string, TensorRequest> partial = kExpected;
  partial.erase("c");
  auto unknown = state_.Begin(TwoEntries(), partial);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(state_.in_force());
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  auto second = state_.Begin(Schedule{8, {Entry({"c"}, {3})}}, kExpected);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(second.status().message().find("schedule 8 while schedule 7"), std::string::npos)
      << second.status();
  EXPECT_TRUE(state_.reporting()) << "the one in force goes on";
}

TEST_F(ScheduleStateTest, SubmissionsAreNumberedInOrder) {
  EXPECT_EQ(state_.NextOrder(), 0u);
  EXPECT_EQ(state_.NextOrder(), 1u);
  ASSERT_TRUE(state_.Begin(TwoEntries(), kExpected).ok());
  state_.Take(state_.Match(Req("a")), true);  // takes number 2
  EXPECT_EQ(state_.NextOrder(), 3u);
}

}  // namespace
}  // namespace troika::internal
