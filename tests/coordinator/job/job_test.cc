#include "coordinator/job/job.h"

#include <deque>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;

using test_util::AttachAll;
using test_util::FakeSink;
using test_util::Register;
using test_util::SettleScheduler;

class JobTest : public ::testing::Test {
 protected:
  std::shared_ptr<Job> MakeJob(int size, JobOptions options = {}) {
    options.negotiator.cycle_time = absl::ZeroDuration();
    return std::make_shared<Job>("train", size, options, scheduler_, clock_,
                                 [this] { done_count_++; });
  }

  // A running job of `size` ranks on host "a", each rank in a session of its own: session(r)
  // is rank r's.
  std::shared_ptr<Job> MakeRunningJob(int size, JobOptions options = {}) {
    std::shared_ptr<Job> job = MakeJob(size, std::move(options));
    AttachAll(*job, std::vector<std::string>(size, "a"));
    for (int rank = 0; rank < size; ++rank) {
      absl::Status opened = job->OpenSession({rank}, 1, &sessions_.emplace_back());
      EXPECT_TRUE(opened.ok()) << "rank " << rank << ": " << opened;
    }
    return job;
  }
  FakeSink& session(int rank) { return sessions_.at(rank); }

  TensorRequest Request(int rank, std::string name) {
    TensorRequest r;
    r.rank = rank;
    r.name = std::move(name);
    r.shape = {2};
    return r;
  }

  Scheduler scheduler_;
  FakeClock clock_;
  std::atomic<int> done_count_{0};
  // MakeRunningJob's sessions; they outlive the jobs of the tests.
  std::deque<FakeSink> sessions_;
};

TEST_F(JobTest, AttachGivesLocalAndCrossRanks) {
  auto job = MakeJob(4);
  std::vector<Membership> m = AttachAll(*job, {"a", "a", "b", "b"});
  EXPECT_EQ(m[3].rank, 3);
  EXPECT_EQ(m[3].size, 4);
  EXPECT_EQ(m[3].local_rank, 1);
  EXPECT_EQ(m[3].local_size, 2);
  EXPECT_EQ(m[3].cross_rank, 1);
  EXPECT_EQ(m[3].cross_size, 2);
  EXPECT_EQ(m[2].local_rank, 0);
  EXPECT_EQ(m[2].cross_rank, 1);
  EXPECT_EQ(job->state(), Job::State::kRunning);
}

TEST_F(JobTest, ResponsesAreNumberedInTheJobsOneOrder) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  for (const char* name : {"x", "y"}) {
    ASSERT_TRUE(job->Submit(&s0, {Request(0, name)}).ok());
    ASSERT_TRUE(job->Submit(&s1, {Request(1, name)}).ok());
  }
  ASSERT_EQ(s1.messages().size(), 2u);
  EXPECT_EQ(s1.messages()[0].seq, 1);
  EXPECT_EQ(s1.messages()[1].seq, 2);
  FakeSink late;
  SessionResume resume{2, 0};
  EXPECT_EQ(job->ResumeSession({0}, 1, resume, &late).code(), absl::StatusCode::kFailedPrecondition)
      << "a job that did not restart resumes nothing";
}

TEST_F(JobTest, RestartedJobReplaysWhatOneNodeMissedThenTakesTheRequestsAgain) {
  // Node a (ranks 0-1) got responses 1..5 before the old coordinator died, node b (ranks 2-3)
  // only 1..3 — and each rank's cache ids up to 9.
  auto job = MakeJob(4);
  AttachAll(*job, {"a", "a", "b", "b"});
  FakeSink a, b;
  ASSERT_TRUE(job->ResumeSession({2, 3}, 1, {3, 9}, &b).ok());
  EXPECT_EQ(job->Submit(&b, {Request(2, "x")}).code(), absl::StatusCode::kFailedPrecondition)
      << "nothing is negotiated before every session resumed";
  FakeSink fresh;
  EXPECT_EQ(job->OpenSession({0}, 1, &fresh).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(job->ResumeSession({0, 1}, 1, {5, 4}, &a).ok());
  // Node a is asked for what node b missed.
  ASSERT_EQ(a.messages().size(), 1u);
  EXPECT_EQ(a.messages()[0].replay_from, 4);
  EXPECT_EQ(a.messages()[0].replay_to, 5);
  EXPECT_EQ(job->Replay(&b, 4, {}).code(), absl::StatusCode::kInvalidArgument)
      << "only the session asked answers";
  std::vector<Response> missed(2);
  missed[0].names = {"p"};
  missed[1].names = {"q"};
  ASSERT_TRUE(job->Replay(&a, 4, missed).ok());
  ASSERT_EQ(b.messages().size(), 2u);
  EXPECT_EQ(b.messages()[0].seq, 4);
  ASSERT_EQ(b.messages()[0].responses.size(), 2u);
  EXPECT_EQ(b.messages()[0].responses[1].names, std::vector<std::string>{"q"});
  EXPECT_TRUE(b.messages()[1].resumed);
  ASSERT_EQ(a.messages().size(), 2u);
  EXPECT_TRUE(a.messages()[1].resumed);

  // Negotiation goes on from response 6, with cache ids above every old one.
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(job->Submit(rank < 2 ? &a : &b, {Request(rank, "x")}).ok());
  }
  ASSERT_EQ(a.messages().size(), 3u);
  EXPECT_EQ(a.messages()[2].seq, 6);
  ASSERT_EQ(a.messages()[2].responses[0].cache_ids.size(), 1u);
  EXPECT_GT(a.messages()[2].responses[0].cache_ids[0], 9);
}

TEST_F(JobTest, RestartedJobWhoseSessionsAllMissedNothingResumesAtOnce) {
  auto job = MakeJob(2);
  AttachAll(*job, {"a", "b"});
  FakeSink a, b;
  ASSERT_TRUE(job->ResumeSession({0}, 1, {7, 0}, &a).ok());
  EXPECT_TRUE(a.messages().empty());
  ASSERT_TRUE(job->ResumeSession({1}, 1, {7, 0}, &b).ok());
  ASSERT_EQ(a.messages().size(), 1u);
  EXPECT_TRUE(a.messages()[0].resumed);
  ASSERT_EQ(b.messages().size(), 1u);
  EXPECT_TRUE(b.messages()[0].resumed);
}

TEST_F(JobTest, ResumeClaimingTheLastCacheIdLeavesTheCacheWorkingWithoutIds) {
  auto job = MakeJob(1);
  AttachAll(*job, {"a"});
  FakeSink a;
  ASSERT_TRUE(job->ResumeSession({0}, 1, {0, std::numeric_limits<int32_t>::max()}, &a).ok());
  ASSERT_TRUE(job->Submit(&a, {Request(0, "x")}).ok());
  ASSERT_EQ(a.messages().size(), 2u);
  EXPECT_EQ(a.messages()[1].responses.at(0).names, std::vector<std::string>{"x"});
  EXPECT_TRUE(a.messages()[1].responses.at(0).cache_ids.empty()) << "no id wraps around";
}

TEST_F(JobTest, ReplayThatNoLongerHoldsTheResponsesAbortsTheJobSayingSo) {
  auto job = MakeJob(2);
  AttachAll(*job, {"a", "b"});
  FakeSink a, b;
  ASSERT_TRUE(job->ResumeSession({0}, 1, {1, 0}, &a).ok());
  ASSERT_TRUE(job->ResumeSession({1}, 1, {3, 0}, &b).ok());
  ASSERT_TRUE(job->Replay(&b, 0, {}).ok());
  EXPECT_EQ(job->state(), Job::State::kAborted);
  EXPECT_THAT(job->abort_reason(), HasSubstr("responses 2 to 3 are no longer held"));
}

TEST_F(JobTest, AttachTimeoutNamesMissingRanks) {
  auto job = MakeJob(4);
  std::promise<absl::StatusOr<std::vector<Membership>>> p;
  job->Attach({1}, "a", absl::Milliseconds(20),
              [&](absl::StatusOr<std::vector<Membership>> m) { p.set_value(m); });
  absl::StatusOr<std::vector<Membership>> m = p.get_future().get();
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("ranks 0, 2-3 did not attach"));
  EXPECT_TRUE(job->done());  // nobody is attached any more
}

TEST_F(JobTest, ResponsesReachEverySessionInTheSameOrder) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "x")}).ok());
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "x")}).ok());
  ASSERT_EQ(s0.messages().size(), 1u);
  ASSERT_EQ(s1.messages().size(), 1u);
  EXPECT_EQ(s0.messages()[0].responses[0].names, std::vector<std::string>{"x"});
}

TEST_F(JobTest, SessionMaySubmitOnlyForItsOwnRanks) {
  auto job = MakeJob(2);
  AttachAll(*job, {"a", "a"});
  FakeSink s0;
  ASSERT_TRUE(job->OpenSession({0}, 1, &s0).ok());
  EXPECT_EQ(job->Submit(&s0, {Request(1, "x")}).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(job->OpenSession({0}, 1, &s0).code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(JobTest, LostSessionAbortsJobOnEverySession) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  job->CloseSession(&s1, absl::OkStatus());
  EXPECT_EQ(job->state(), Job::State::kAborted);
  ASSERT_EQ(s0.messages().size(), 1u);
  EXPECT_THAT(s0.messages()[0].abort_reason, HasSubstr("rank 1 on a lost the connection"));
  EXPECT_FALSE(job->done());  // s0 still open
  job->CloseSession(&s0, absl::OkStatus());
  EXPECT_TRUE(job->done());
}

TEST_F(JobTest, SessionEndedForWhatItSentAbortsTheJobSayingSo) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  job->CloseSession(&s1, absl::InvalidArgumentError("allreduce 'x' on rank 1: unknown dtype"));
  EXPECT_EQ(job->state(), Job::State::kAborted);
  ASSERT_EQ(s0.messages().size(), 1u);
  EXPECT_THAT(s0.messages()[0].abort_reason,
              HasSubstr("the coordinator ended the session of rank 1: allreduce 'x' on rank 1: "
                        "unknown dtype"));
}

TEST_F(JobTest, RankEndedByItsAgentAbortsTheJobNamingTheAgentsVerdict) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->ReportExit(&s1, {1, "a", -1, 0, "negative dimension"}).ok());
  EXPECT_EQ(job->state(), Job::State::kAborted);
  ASSERT_EQ(s0.messages().size(), 1u);
  EXPECT_THAT(s0.messages()[0].abort_reason,
              HasSubstr("rank 1 on a: its agent ended its session: negative dimension"));
}

TEST_F(JobTest, GoodbyeFromEveryRankFinishesJob) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->Goodbye(&s0, {0}).ok());
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "late")}).ok());
  ASSERT_EQ(s1.messages().size(), 1u);
  EXPECT_THAT(s1.messages()[0].responses[0].error, HasSubstr("rank 0 has shut down"));
  ASSERT_TRUE(job->Goodbye(&s1, {1}).ok());
  EXPECT_EQ(job->state(), Job::State::kFinished);
  job->CloseSession(&s0, absl::OkStatus());
  job->CloseSession(&s1, absl::OkStatus());
  EXPECT_TRUE(job->done());
  EXPECT_TRUE(s0.messages().empty() || s0.messages().back().abort_reason.empty());
}

TEST_F(JobTest, NodeAttachGetsEveryMembershipOfTheNode) {
  auto job = MakeJob(4);
  auto block_a = Register(*job, "a", 2, -1);
  auto block_b = Register(*job, "b", 2, -1);
  ASSERT_TRUE(block_a.ok() && block_b.ok());
  EXPECT_EQ(block_a->first_rank, 0);
  EXPECT_EQ(block_b->first_rank, 2);
  EXPECT_EQ(Register(*job, "a", 2, -1)->first_rank, 0);  // a restarted agent gets its block
  EXPECT_EQ(Register(*job, "c", 2, -1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Register(*job, "c", 2, 1).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Register(*job, "c", 3, -1).status().code(), absl::StatusCode::kInvalidArgument);

  std::promise<absl::StatusOr<std::vector<Membership>>> a, b;
  job->Attach({0, 1}, "a", absl::Seconds(30), [&](auto m) { a.set_value(m); });
  job->Attach({2, 3}, "b", absl::Seconds(30), [&](auto m) { b.set_value(m); });
  auto ma = a.get_future().get();
  ASSERT_TRUE(ma.ok()) << ma.status();
  ASSERT_EQ(ma->size(), 2u);
  EXPECT_EQ((*ma)[1].rank, 1);
  EXPECT_EQ((*ma)[1].local_rank, 1);
  auto mb = b.get_future().get();
  ASSERT_TRUE(mb.ok());
  EXPECT_EQ((*mb)[0].cross_rank, 1);
}

TEST_F(JobTest, ReportedRankExitAbortsJobWithTheReason) {
  auto job = MakeJob(2);
  AttachAll(*job, {"a", "a"});
  FakeSink node;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &node).ok());
  ASSERT_TRUE(job->ReportExit(&node, {1, "host-a", 0, 9}).ok());
  EXPECT_EQ(job->state(), Job::State::kAborted);
  ASSERT_EQ(node.messages().size(), 1u);
  EXPECT_THAT(node.messages()[0].abort_reason,
              HasSubstr("rank 1 on host-a was killed by signal 9 (Killed)"));
}

TEST_F(JobTest, ASessionOpeningAfterTheAbortIsToldTheAbortWithItsCause) {
  // Node b's rank exits before node a's session reaches the coordinator (node a's agent
  // launched its ranks once they attached): node a's session still opens, and hears the abort
  // with the exit that caused it, as node b's did; its agent then ends with that exit code.
  auto job = MakeJob(4);
  AttachAll(*job, {"a", "a", "b", "b"});
  FakeSink b;
  ASSERT_TRUE(job->OpenSession({2, 3}, 1, &b).ok());
  ASSERT_TRUE(job->ReportExit(&b, {3, "b", 5, 0}).ok());
  ASSERT_EQ(job->state(), Job::State::kAborted);
  // Node b's session closed too: the job is done, and reported so.
  job->CloseSession(&b, absl::OkStatus());
  SettleScheduler(scheduler_);
  ASSERT_EQ(done_count_, 1);
  FakeSink a;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &a).ok());
  ASSERT_EQ(a.messages().size(), 1u);
  const DownMessage down = a.messages()[0];
  EXPECT_EQ(down.abort_reason, b.messages().at(0).abort_reason);
  EXPECT_THAT(down.abort_reason, HasSubstr("rank 3 on b exited with code 5"));
  ASSERT_TRUE(down.abort_cause.has_value());
  EXPECT_EQ(down.abort_cause->exit_code, 5);
  // Its ranks' exits are taken as the other node's were, and once it closes, the job is done
  // again: reported again, so that the registry releases it (it found the job not done, a
  // session open, when the first report reached it).
  EXPECT_TRUE(job->ReportExit(&a, {0, "a", 0, 15}).ok());
  job->CloseSession(&a, absl::OkStatus());
  SettleScheduler(scheduler_);
  EXPECT_EQ(done_count_, 2);
  // A session of another generation is still refused.
  FakeSink stale;
  EXPECT_FALSE(job->OpenSession({0, 1}, 2, &stale).ok());
  EXPECT_TRUE(stale.messages().empty());
}

TEST_F(JobTest, StallPastShutdownTimeAbortsJobNamingMissingRanks) {
  JobOptions options;
  options.stall.warning_time = absl::Seconds(60);
  options.stall.shutdown_time = absl::Seconds(300);
  auto job = MakeRunningJob(3, options);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "grad/a")}).ok());

  clock_.Advance(absl::Seconds(100));
  job->InspectStalls();  // only a warning
  EXPECT_EQ(job->state(), Job::State::kRunning);

  clock_.Advance(absl::Seconds(201));
  job->InspectStalls();
  ASSERT_EQ(job->state(), Job::State::kAborted);
  EXPECT_THAT(job->abort_reason(), HasSubstr("'grad/a' (waiting 5m1s) is missing ranks 0, 2"));
  ASSERT_FALSE(s0.messages().empty());
  EXPECT_THAT(s0.messages().back().abort_reason, HasSubstr("stalled for more than 5m"));
  // The job is named once, by the abort.
  EXPECT_THAT(s0.messages().back().abort_reason,
              ::testing::StartsWith("job 'train' aborted: 1 tensor stalled"));
}

TEST_F(JobTest, EveryRankBlockedOnPendingTensorsAbortsJobAtOnce) {
  auto job = MakeRunningJob(3);
  FakeSink &s0 = session(0), &s1 = session(1), &s2 = session(2);
  EXPECT_EQ(job->ReportWaitState(&s0, {1, {"a"}}).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "a")}).ok());
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "a")}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s0, {0, {"a"}}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s1, {1, {"a"}}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s2, {2, {"b"}}).ok());
  EXPECT_EQ(job->state(), Job::State::kRunning) << "'b' was never submitted: not pending yet";
  ASSERT_TRUE(job->Submit(&s2, {Request(2, "b")}).ok());
  ASSERT_EQ(job->state(), Job::State::kAborted);
  EXPECT_EQ(job->abort_reason(), "deadlock: rank 2 waits for 'b'; ranks 0-1 wait for 'a'");
  ASSERT_FALSE(s1.messages().empty());
  EXPECT_THAT(s1.messages().back().abort_reason, HasSubstr("deadlock"));
}

TEST_F(JobTest, BlockedRanksAreNoDeadlockWhenDetectionIsOff) {
  JobOptions options;
  options.deadlock_detection = false;
  auto job = MakeRunningJob(2, options);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "a")}).ok());
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "b")}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s0, {0, {"a"}}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s1, {1, {"b"}}).ok());
  EXPECT_EQ(job->state(), Job::State::kRunning);
}

TEST_F(JobTest, RankThatReportsItIsNoLongerBlockedPreventsTheAbort) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "a")}).ok());
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "b")}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s0, {0, {"a"}}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s0, {0, {}}).ok());
  ASSERT_TRUE(job->ReportWaitState(&s1, {1, {"b"}}).ok());
  EXPECT_EQ(job->state(), Job::State::kRunning) << "rank 0 is no longer blocked";
  ASSERT_TRUE(job->ReportWaitState(&s0, {0, {"a"}}).ok());
  EXPECT_EQ(job->state(), Job::State::kAborted);
}

TEST_F(JobTest, CompletedTensorNeverCountsAsStalled) {
  JobOptions options;
  options.stall.shutdown_time = absl::Seconds(1);
  auto job = MakeRunningJob(2, options);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "x")}).ok());
  clock_.Advance(absl::Milliseconds(30));
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "x")}).ok());
  clock_.Advance(absl::Seconds(10));
  job->InspectStalls();
  EXPECT_EQ(job->state(), Job::State::kRunning);
}

TEST_F(JobTest, StragglerSnapshotRecordsLatenessOfReadyTensors) {
  auto job = MakeRunningJob(2);
  FakeSink &s0 = session(0), &s1 = session(1);
  ASSERT_TRUE(job->Submit(&s0, {Request(0, "x")}).ok());
  clock_.Advance(absl::Milliseconds(30));
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "x")}).ok());
  StragglerSnapshot snapshot = job->Describe().stragglers;
  EXPECT_EQ(snapshot.tensors, 1);
  ASSERT_EQ(snapshot.ranks.size(), 2u);
  EXPECT_EQ(snapshot.ranks[1].mean_lateness, absl::Milliseconds(30));
  EXPECT_EQ(snapshot.ranks[1].last_count, 1);
  EXPECT_EQ(snapshot.ranks[0].mean_lateness, absl::ZeroDuration());
}

TEST_F(JobTest, DescribeShowsRanksPendingTensorsWithMissingRanksAndAge) {
  auto job = MakeJob(3);
  clock_.Advance(absl::Seconds(5));
  JobInfo before = job->Describe();
  EXPECT_EQ(before.state, "attaching");
  EXPECT_EQ(before.attached_ranks(), 0);
  EXPECT_EQ(before.age, absl::Seconds(5));
  ASSERT_EQ(before.ranks.size(), 3u);
  EXPECT_EQ(before.ranks[2].local_rank, -1);

  AttachAll(*job, {"a", "a", "b"});
  FakeSink s0, s1;
  ASSERT_TRUE(job->OpenSession({0}, 1, &s0).ok());
  ASSERT_TRUE(job->OpenSession({1}, 1, &s1).ok());
  ASSERT_TRUE(job->Submit(&s1, {Request(1, "grad/a")}).ok());
  clock_.Advance(absl::Seconds(2));

  JobInfo info = job->Describe();
  EXPECT_EQ(info.name, "train");
  EXPECT_EQ(info.size, 3);
  EXPECT_EQ(info.state, "running");
  EXPECT_EQ(info.epoch, 1);
  EXPECT_EQ(info.attached_ranks(), 3);
  EXPECT_EQ(info.ranks[2].host, "b");
  EXPECT_EQ(info.ranks[1].local_rank, 1);
  EXPECT_EQ(info.ranks[2].cross_rank, 1);
  EXPECT_TRUE(info.ranks[1].connected);
  EXPECT_FALSE(info.ranks[2].connected);
  EXPECT_FALSE(info.ranks[0].departed);
  ASSERT_EQ(info.pending.size(), 1u);
  EXPECT_EQ(info.pending[0].name, "grad/a");
  EXPECT_EQ(info.pending[0].waiting, absl::Seconds(2));
  EXPECT_THAT(info.pending[0].missing_ranks, ::testing::ElementsAre(0, 2));
  EXPECT_EQ(info.negotiation.cycle_time, absl::ZeroDuration());
  EXPECT_EQ(info.stragglers.ranks.size(), 3u);
}

TEST_F(JobTest, DescribeAfterAbortGivesTheReasonAndDepartedRanks) {
  auto job = MakeJob(2);
  AttachAll(*job, {"a", "a"});
  FakeSink s0;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &s0).ok());
  ASSERT_TRUE(job->Goodbye(&s0, {0}).ok());
  job->Abort(AbortCause::kCancelled, "cancelled by troikactl: test");
  JobInfo info = job->Describe();
  EXPECT_TRUE(info.ranks[0].departed);
  EXPECT_FALSE(info.ranks[1].departed);
  EXPECT_EQ(info.state, "aborted");
  EXPECT_EQ(info.abort_reason, "cancelled by troikactl: test");
}

}  // namespace
}  // namespace troika::coordinator
