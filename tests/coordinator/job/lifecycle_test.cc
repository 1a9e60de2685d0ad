// Lifecycle on its own, over real parts: each transition and what it tells the sessions, the
// waiting attaches, the joining nodes and the key-value store; the checks that name the state;
// when the job is done, and on_done posted once.

#include "coordinator/job/lifecycle.h"

#include <atomic>
#include <future>
#include <optional>
#include <vector>

#include "common/wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::FakeSink;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using State = Lifecycle::State;

// Keeps how the job ended its stream too.
class EndingSink : public FakeSink {
 public:
  void End(const absl::Status& status) override { ended = status; }
  std::optional<absl::Status> ended;
};

class LifecycleTest : public ::testing::Test {
 protected:
  static constexpr int kSize = 2;

  LifecycleTest()
      : roster_("j", kSize, 1, scheduler_),
        sessions_("j", kSize, {}),
        generations_(kSize, options_, absl::Now()),
        kv_(scheduler_),
        lifecycle_(
            "j", roster_, sessions_, generations_, kv_, scheduler_,
            [this](AbortCause cause) { aborts_.push_back(cause); }, [this] { ++done_calls_; }) {}

  // Both ranks attach (on one host) and the job runs.
  void RunJob() {
    roster_.Wait(
        {0, 1}, "h", absl::Seconds(30), [](auto) {}, [](uint64_t) {});
    roster_.Complete();
    lifecycle_.Run();
  }
  // An attach of rank 0 that waits; its answer goes to `*answer`.
  void WaitingAttach(std::optional<absl::Status>* answer) {
    roster_.Wait(
        {0}, "h", absl::Seconds(30),
        [answer](absl::StatusOr<std::vector<Membership>> m) { *answer = m.status(); },
        [](uint64_t) {});
  }
  // A node waiting to join; its answer goes to `*answer`.
  void Joining(std::optional<absl::Status>* answer) {
    generations_.Join(
        {"n", 1, [answer](absl::StatusOr<NodeBlock> b) { *answer = b.status(); }, nullptr, ""});
  }
  // A key-value get that waits for a key never set; its answer goes to `*answer`.
  void WaitingGet(std::optional<absl::Status>* answer) {
    kv_.Get("never", absl::Seconds(30),
            [answer](absl::StatusOr<std::string> v) { *answer = v.status(); });
  }

  // How often on_done ran, once what was posted before ran (the scheduler runs in order).
  int DoneCalls() {
    test_util::SettleScheduler(scheduler_);
    return done_calls_;
  }

  Scheduler scheduler_;
  JobOptions options_;
  Roster roster_;
  Sessions sessions_;
  Generations generations_;
  KvStore kv_;
  std::vector<AbortCause> aborts_;
  std::atomic<int> done_calls_{0};
  Lifecycle lifecycle_;
};

TEST_F(LifecycleTest, RunsOnceAttachedAndFinishesOnceEveryRankLeft) {
  EXPECT_EQ(lifecycle_.state(), State::kAttaching);
  EXPECT_FALSE(lifecycle_.FinishIfAllDeparted()) << "not running yet";
  RunJob();
  EXPECT_EQ(lifecycle_.state(), State::kRunning);
  std::optional<absl::Status> joiner;
  Joining(&joiner);
  roster_.Depart(0);
  EXPECT_FALSE(lifecycle_.FinishIfAllDeparted()) << "rank 1 is still in";
  EXPECT_FALSE(joiner.has_value());
  roster_.Depart(1);
  EXPECT_TRUE(lifecycle_.FinishIfAllDeparted());
  EXPECT_EQ(lifecycle_.state(), State::kFinished);
  EXPECT_TRUE(lifecycle_.over());
  ASSERT_TRUE(joiner.has_value());
  EXPECT_EQ(joiner->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(joiner->message(), "job 'j' finished before this node was admitted");
  EXPECT_FALSE(lifecycle_.FinishIfAllDeparted()) << "finished once";
  EXPECT_TRUE(aborts_.empty());
}

TEST_F(LifecycleTest, AbortTellsEverySessionAndFailsWhatWaitsOnce) {
  FakeSink a, b;
  ASSERT_TRUE(sessions_.Open({0}, &a, {}).ok());
  ASSERT_TRUE(sessions_.Open({1}, &b, {}).ok());
  std::optional<absl::Status> attach, joiner, get;
  WaitingAttach(&attach);
  Joining(&joiner);
  WaitingGet(&get);
  RankExit exit;
  exit.rank = 1;
  exit.exit_code = 3;
  ASSERT_TRUE(lifecycle_.Abort(AbortCause::kRankExit, "rank 1 exited", exit, false));
  EXPECT_EQ(lifecycle_.state(), State::kAborted);
  EXPECT_EQ(lifecycle_.abort_reason(), "rank 1 exited");
  EXPECT_THAT(aborts_, ElementsAre(AbortCause::kRankExit));
  for (FakeSink* sink : {&a, &b}) {
    ASSERT_EQ(sink->messages().size(), 1u);
    const DownMessage m = sink->messages()[0];
    EXPECT_EQ(m.abort_reason, "job 'j' aborted: rank 1 exited");
    ASSERT_TRUE(m.abort_cause.has_value());
    EXPECT_EQ(m.abort_cause->exit_code, 3);
    EXPECT_FALSE(m.membership_change.has_value());
  }
  for (const auto& answer : {attach, joiner, get}) {
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->code(), absl::StatusCode::kAborted);
    EXPECT_EQ(answer->message(), "job 'j' aborted: rank 1 exited");
  }

  EXPECT_FALSE(lifecycle_.Abort(AbortCause::kStall, "again", std::nullopt, true));
  EXPECT_EQ(lifecycle_.abort_reason(), "rank 1 exited") << "the first reason stays";
  EXPECT_EQ(aborts_.size(), 1u);
  EXPECT_EQ(a.messages().size(), 1u) << "told once";
}

TEST_F(LifecycleTest, AFinishedJobIsAbortedOnlyWhenAskedToo) {
  RunJob();
  roster_.Depart(0);
  roster_.Depart(1);
  ASSERT_TRUE(lifecycle_.FinishIfAllDeparted());
  EXPECT_FALSE(lifecycle_.Abort(AbortCause::kCancelled, "late", std::nullopt, false));
  EXPECT_EQ(lifecycle_.state(), State::kFinished);
  EXPECT_TRUE(aborts_.empty());
  // A rank that had left failed while the job formed again: every agent must learn it.
  EXPECT_TRUE(lifecycle_.Abort(AbortCause::kRankExit, "rank 0 failed", std::nullopt, true));
  EXPECT_EQ(lifecycle_.state(), State::kAborted);
  EXPECT_THAT(aborts_, ElementsAre(AbortCause::kRankExit));
}

TEST_F(LifecycleTest, AnEndedGenerationTellsTheChangeWithoutCountingAnAbort) {
  RunJob();
  FakeSink a;
  ASSERT_TRUE(sessions_.Open({0}, &a, {}).ok());
  std::optional<absl::Status> attach, get;
  WaitingAttach(&attach);
  WaitingGet(&get);
  MembershipChange change = generations_.Survivors({1}, {});
  lifecycle_.EndGeneration(change, "rank 1 lost the connection", std::nullopt);
  EXPECT_EQ(lifecycle_.state(), State::kAborted);
  EXPECT_EQ(lifecycle_.abort_reason(),
            "rank 1 lost the connection; the job goes on with 1 rank as generation 2");
  EXPECT_TRUE(aborts_.empty()) << "the job goes on";
  const std::string message =
      "membership of job 'j' changed: " + std::string(lifecycle_.abort_reason());
  ASSERT_EQ(a.messages().size(), 1u);
  const DownMessage m = a.messages()[0];
  EXPECT_EQ(m.abort_reason, message);
  ASSERT_TRUE(m.membership_change.has_value());
  EXPECT_THAT(m.membership_change->next_rank, ElementsAre(0, -1));
  ASSERT_TRUE(attach.has_value());
  EXPECT_EQ(attach->code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(MembershipChangeOf(*attach).has_value()) << "the attach learns the renumbering";
  EXPECT_EQ(MembershipChangeOf(*attach)->epoch, 2);
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->message(), message);
  // An attach that reaches the ended generation later is answered the same.
  const absl::Status late = lifecycle_.CheckAttachable("it takes no new ranks");
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(late.message(), message);
  ASSERT_TRUE(MembershipChangeOf(late).has_value());
  EXPECT_THAT(MembershipChangeOf(late)->next_rank, ElementsAre(0, -1));
  EXPECT_EQ(lifecycle_.CheckNotOver("").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LifecycleTest, ADetachedJobEndsItsSessionsAndIsNeverDone) {
  RunJob();
  EndingSink a;
  ASSERT_TRUE(sessions_.Open({0, 1}, &a, {}).ok());
  std::optional<absl::Status> attach, get;
  WaitingAttach(&attach);
  WaitingGet(&get);
  lifecycle_.Detach("the coordinator stops");
  EXPECT_TRUE(lifecycle_.detached());
  EXPECT_EQ(lifecycle_.state(), State::kRunning) << "not aborted: it resumes later";
  for (const auto& answer : {a.ended, attach, get}) {
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(answer->message(), "the coordinator stops");
  }
  EXPECT_EQ(lifecycle_.CheckRunning("no session can open").code(), absl::StatusCode::kUnavailable);
  sessions_.Close(&a);
  EXPECT_FALSE(lifecycle_.done()) << "its record stays for a restarted coordinator";
  EXPECT_TRUE(aborts_.empty());
}

TEST_F(LifecycleTest, AJobThatIsOverIsNotDetached) {
  ASSERT_TRUE(lifecycle_.Abort(AbortCause::kCancelled, "cancelled", std::nullopt, false));
  lifecycle_.Detach("the coordinator stops");
  EXPECT_FALSE(lifecycle_.detached());
  EXPECT_TRUE(lifecycle_.done());
}

TEST_F(LifecycleTest, ChecksNameTheStateAndAnAbortsReason) {
  absl::Status attaching = lifecycle_.CheckRunning("no session can open");
  EXPECT_EQ(attaching.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(attaching.message(), "job 'j' is attaching; no session can open");
  EXPECT_TRUE(lifecycle_.CheckNotOver("it admits no nodes").ok());
  RunJob();
  EXPECT_TRUE(lifecycle_.CheckRunning("no session can open").ok());
  lifecycle_.Abort(AbortCause::kDeadlock, "every rank is blocked", std::nullopt, false);
  EXPECT_EQ(lifecycle_.CheckNotOver("it admits no nodes").message(),
            "job 'j' is aborted (every rank is blocked); it admits no nodes");
  EXPECT_EQ(lifecycle_.CheckNotOver("").message(), "job 'j' is aborted (every rank is blocked)");
  const absl::Status attach = lifecycle_.CheckAttachable("it takes no new ranks");
  EXPECT_EQ(attach.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(attach.message(), "job 'j' is aborted (every rank is blocked); it takes no new ranks");
  EXPECT_FALSE(MembershipChangeOf(attach).has_value()) << "not a generation that ended";
  EXPECT_STREQ(JobStateName(State::kFinished), "finished");
}

TEST_F(LifecycleTest, DoneOnceOverWithNothingOpenAndReportedOnce) {
  EXPECT_TRUE(lifecycle_.done()) << "attaching with no rank attached: abandoned";
  std::optional<absl::Status> attach;
  WaitingAttach(&attach);
  EXPECT_FALSE(lifecycle_.done()) << "an attach waits";
  roster_.FailWaiters(absl::DeadlineExceededError("late"));
  roster_.ClearHosts();
  EXPECT_TRUE(lifecycle_.done());
  lifecycle_.MaybeDone();
  lifecycle_.MaybeDone();
  EXPECT_EQ(DoneCalls(), 1) << "posted once";

  lifecycle_.Reopen();
  RunJob();
  FakeSink a;
  ASSERT_TRUE(sessions_.Open({0, 1}, &a, {}).ok());
  EXPECT_FALSE(lifecycle_.done()) << "running";
  lifecycle_.Abort(AbortCause::kCancelled, "cancelled", std::nullopt, false);
  EXPECT_FALSE(lifecycle_.done()) << "a session is open";
  sessions_.Close(&a);
  EXPECT_TRUE(lifecycle_.done());
  lifecycle_.MaybeDone();
  EXPECT_EQ(DoneCalls(), 2) << "once more after Reopen";
}

}  // namespace
}  // namespace troika::coordinator
