// MembershipPolicy on its own, over real parts set in each state by hand: what losing ranks, a
// rank's exit, an attach timeout, a left rank's exit, an attach and a node registering mean
// for a job that is not elastic, an elastic one, and one that forms again.

#include "coordinator/job/membership_policy.h"

#include <csignal>
#include <memory>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = Verdict::Kind;
using Route = MembershipPolicy::AttachRoute::Kind;

// The parts of one job of `size` ranks, made with `options`, and the policy over them.
struct Parts {
  Parts(int size, JobOptions options)
      : size(size),
        options(std::move(options)),
        roster("j", size, this->options.epoch, scheduler),
        sessions("j", size, {}),
        generations(size, this->options, absl::Now()),
        kv(scheduler),
        lifecycle("j", roster, sessions, generations, kv, scheduler, nullptr, [] {}),
        policy("j", size, lifecycle, roster, sessions, generations) {}

  // Every rank attaches, on host "h", and the job runs.
  void Run() {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    roster.Wait(
        ranks, "h", absl::Seconds(30), [](auto) {}, [](uint64_t) {});
    roster.Complete();
    lifecycle.Run();
  }

  const int size;
  Scheduler scheduler;
  JobOptions options;
  Roster roster;
  Sessions sessions;
  Generations generations;
  KvStore kv;
  Lifecycle lifecycle;
  MembershipPolicy policy;
};

JobOptions Elastic(int min_size) {
  JobOptions options;
  options.min_size = min_size;
  options.next_generation = [](int, int64_t, std::optional<AbortCause>, const std::string&) {
    return std::shared_ptr<Job>();
  };
  return options;
}

JobOptions FormsAgain(int64_t epoch = 1) {
  JobOptions options;
  options.epoch = epoch;
  options.next_incarnation = [](int64_t) { return std::shared_ptr<Job>(); };
  return options;
}

std::unique_ptr<Parts> Make(int size, JobOptions options = {}, bool run = true) {
  auto parts = std::make_unique<Parts>(size, std::move(options));
  if (run) parts->Run();
  return parts;
}

RankExit Exit(int rank, int code, int signal = 0, std::string host = "h") {
  RankExit exit;
  exit.rank = rank;
  exit.exit_code = code;
  exit.signal = signal;
  exit.host = std::move(host);
  return exit;
}

TEST(MembershipPolicyTest, LosingRanksAbortsAJobThatIsNotElastic) {
  auto p = Make(3);
  Verdict v = p->policy.Lose({1}, AbortCause::kConnectionLost, "rank 1 lost the connection");
  EXPECT_EQ(v.kind, Kind::kAbort);
  EXPECT_EQ(v.cause, AbortCause::kConnectionLost);
  EXPECT_EQ(v.reason, "rank 1 lost the connection");
  EXPECT_FALSE(v.finished_too);
}

TEST(MembershipPolicyTest, ElasticJobWithItsMinimumLeftEndsItsGenerationRenumbered) {
  auto p = Make(4, Elastic(2));
  p->roster.Depart(0);
  Verdict v = p->policy.Lose({2}, AbortCause::kRankExit, "rank 2 exited", Exit(2, 1));
  ASSERT_EQ(v.kind, Kind::kEndGeneration);
  EXPECT_EQ(v.cause, AbortCause::kRankExit);
  EXPECT_EQ(v.reason, "rank 2 exited");
  ASSERT_TRUE(v.exit.has_value());
  EXPECT_EQ(v.change.epoch, 2);
  EXPECT_EQ(v.change.size, 2);
  EXPECT_THAT(v.change.next_rank, ElementsAre(-1, 0, -1, 1));
}

TEST(MembershipPolicyTest, ElasticJobBelowItsMinimumAbortsSayingSo) {
  auto p = Make(3, Elastic(2));
  Verdict v = p->policy.Lose({0, 1}, AbortCause::kRankExit, "ranks 0-1 exited");
  EXPECT_EQ(v.kind, Kind::kAbort);
  EXPECT_EQ(v.reason, "ranks 0-1 exited; 1 rank remains, below the job's minimum of 2");
}

TEST(MembershipPolicyTest, ElasticJobThatDoesNotRunAbortsOnALoss) {
  auto attaching = Make(3, Elastic(1), /*run=*/false);
  EXPECT_EQ(attaching->policy.Lose({0}, AbortCause::kRankExit, "x").kind, Kind::kAbort);
  auto detached = Make(3, Elastic(1));
  detached->lifecycle.Detach("restarting");
  EXPECT_EQ(detached->policy.Lose({0}, AbortCause::kRankExit, "x").kind, Kind::kAbort);
}

TEST(MembershipPolicyTest, ClosedSessionLosesItsRanksThatHadNotLeft) {
  auto p = Make(3, Elastic(1));
  p->roster.Depart(0);
  Verdict v = p->policy.SessionClosed({0, 1}, absl::OkStatus());
  ASSERT_EQ(v.kind, Kind::kEndGeneration);
  EXPECT_EQ(v.cause, AbortCause::kConnectionLost);
  EXPECT_EQ(v.reason, "rank 1 on h lost the connection to the coordinator");
  EXPECT_THAT(v.change.next_rank, ElementsAre(-1, -1, 0));
  EXPECT_EQ(p->policy.SessionClosed({0}, absl::OkStatus()).kind, Kind::kNone) << "rank 0 left";
}

TEST(MembershipPolicyTest, SessionEndedForWhatItSentAbortsEvenAnElasticJob) {
  auto p = Make(2, Elastic(1));
  Verdict v = p->policy.SessionClosed({1}, absl::InvalidArgumentError("bad request"));
  EXPECT_EQ(v.kind, Kind::kAbort);
  EXPECT_EQ(v.cause, AbortCause::kProtocolError);
  EXPECT_EQ(v.reason, "the coordinator ended the session of rank 1: bad request");
}

TEST(MembershipPolicyTest, ClosedSessionOfAJobThatDoesNotRunChangesNothing) {
  auto attaching = Make(2, {}, /*run=*/false);
  EXPECT_EQ(attaching->policy.SessionClosed({0}, absl::OkStatus()).kind, Kind::kNone);
  auto detached = Make(2);
  detached->lifecycle.Detach("restarting");
  EXPECT_EQ(detached->policy.SessionClosed({0}, absl::OkStatus()).kind, Kind::kNone);
}

TEST(MembershipPolicyTest, CleanExitBeforeJoiningDepartsNamingTheHost) {
  auto p = Make(2);
  Verdict v = p->policy.Exit(Exit(1, 0, 0, "node-b"));
  EXPECT_EQ(v.kind, Kind::kDepart);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.reason, "on node-b exited with code 0 before joining the job");
  EXPECT_EQ(p->policy.Exit(Exit(1, 0, 0, "")).reason, "exited with code 0 before joining the job");
}

TEST(MembershipPolicyTest, FailedExitIsALossWithTheAgentsVerdict) {
  auto p = Make(2);
  Verdict v = p->policy.Exit(Exit(1, 3));
  EXPECT_EQ(v.kind, Kind::kAbort);
  EXPECT_EQ(v.cause, AbortCause::kRankExit);
  EXPECT_EQ(v.reason, DescribeRankExit(Exit(1, 3)));
  ASSERT_TRUE(v.exit.has_value());
  EXPECT_EQ(v.exit->exit_code, 3);
}

// A clean exit of a rank that left matters only to a job that forms again (it will not attach
// again); a failed one fails every job, an elastic one too (issue 46: an elastic job whose
// ranks all exited 1 after they shut down was reported finished, and troikarun exited 0).
TEST(MembershipPolicyTest, ExitOfARankThatLeftFailsEveryJobIfItFailedElseMattersToOneFormingAgain) {
  for (JobOptions options : {JobOptions{}, Elastic(1)}) {
    auto p = Make(2, options);
    p->roster.Depart(0);
    EXPECT_EQ(p->policy.Exit(Exit(0, 0)).kind, Kind::kNone);
    Verdict failed = p->policy.Exit(Exit(0, 1));
    EXPECT_EQ(failed.kind, Kind::kLeftRankExited);
    EXPECT_EQ(p->policy.LeftRankExited(*failed.exit).kind, Kind::kAbort);
    EXPECT_TRUE(p->policy.LeftRankExited(*failed.exit).finished_too);
    EXPECT_EQ(p->policy.Exit(Exit(0, 0, SIGKILL)).kind, Kind::kLeftRankExited);
  }
  auto again = Make(2, FormsAgain());
  again->roster.Depart(0);
  Verdict v = again->policy.Exit(Exit(0, 1));
  EXPECT_EQ(v.kind, Kind::kLeftRankExited);
  ASSERT_TRUE(v.exit.has_value());
  EXPECT_EQ(v.exit->rank, 0);
}

TEST(MembershipPolicyTest, LeftRanksFailureAbortsTheIncarnationItLeftEvenFinished) {
  auto p = Make(2, FormsAgain());
  EXPECT_EQ(p->policy.LeftRankExited(Exit(0, 0)).kind, Kind::kNone);
  Verdict v = p->policy.LeftRankExited(Exit(0, 0, 9, "a"));
  EXPECT_EQ(v.kind, Kind::kAbort);
  EXPECT_TRUE(v.finished_too);
  EXPECT_THAT(v.reason, HasSubstr("rank 0 on a was killed by signal 9"));
  EXPECT_THAT(v.reason, HasSubstr("after it shut down"));
}

TEST(MembershipPolicyTest, RankGoneAbortsAnIncarnationStillAttachingElseIsAnExit) {
  auto attaching = Make(2, FormsAgain(2), /*run=*/false);
  Verdict v = attaching->policy.RankGone(Exit(1, 0, 0, ""));
  EXPECT_EQ(v.kind, Kind::kAbort);
  EXPECT_EQ(v.reason, "rank 1 exited with code 0 after it shut down, without attaching again");
  EXPECT_FALSE(v.exit.has_value()) << "a clean exit is no failure to pass on";
  EXPECT_TRUE(attaching->policy.RankGone(Exit(1, 2)).exit.has_value());
  auto running = Make(2, FormsAgain(2));
  EXPECT_EQ(running->policy.RankGone(Exit(1, 0)).kind, Kind::kDepart);
}

TEST(MembershipPolicyTest, AttachTimeoutFailsEveryAttachNamingTheMissingRanks) {
  auto p = Make(3, {}, /*run=*/false);
  p->roster.Wait(
      {0}, "h", absl::Seconds(30), [](auto) {}, [](uint64_t) {});
  Verdict v = p->policy.AttachTimedOut(absl::Seconds(5));
  EXPECT_EQ(v.kind, Kind::kFailAttaches);
  EXPECT_EQ(v.reason, "job 'j': ranks 1-2 did not attach within 5s (attached: rank 0)");
  auto again = Make(2, FormsAgain(2), /*run=*/false);
  EXPECT_THAT(again->policy.AttachTimedOut(absl::Seconds(5)).reason,
              HasSubstr("forms again only once every rank attached again"));
}

TEST(MembershipPolicyTest, ElasticAttachTimeoutWithTheMinimumEndsTheGenerationWithoutThem) {
  auto p = Make(3, Elastic(2), /*run=*/false);
  p->roster.Wait(
      {0, 2}, "h", absl::Seconds(30), [](auto) {}, [](uint64_t) {});
  Verdict v = p->policy.AttachTimedOut(absl::Seconds(5));
  ASSERT_EQ(v.kind, Kind::kEndGeneration);
  EXPECT_EQ(v.cause, AbortCause::kAttachTimeout);
  EXPECT_THAT(v.change.next_rank, ElementsAre(0, -1, 1));
  auto too_few = Make(3, Elastic(3), /*run=*/false);
  EXPECT_EQ(too_few->policy.AttachTimedOut(absl::Seconds(5)).kind, Kind::kFailAttaches);
}

TEST(MembershipPolicyTest, RouteAttachRefusesBadRanksAndADetachedJob) {
  auto p = Make(2, {}, /*run=*/false);
  MembershipPolicy::AttachRoute r = p->policy.RouteAttach({}, false);
  EXPECT_EQ(r.kind, Route::kRefuse);
  EXPECT_EQ(r.refusal.code(), absl::StatusCode::kInvalidArgument);
  r = p->policy.RouteAttach({0, 2}, false);
  EXPECT_EQ(r.kind, Route::kRefuse);
  EXPECT_EQ(r.refusal.message(), "rank 2 is out of range for job 'j' of size 2");
  EXPECT_EQ(p->policy.RouteAttach({0}, false).kind, Route::kWait);
  p->lifecycle.Detach("restarting");
  EXPECT_EQ(p->policy.RouteAttach({0}, false).refusal.code(), absl::StatusCode::kUnavailable);
}

TEST(MembershipPolicyTest, RouteAttachAnswersARunningJobAndRefusesOneThatIsOver) {
  auto p = Make(2);
  EXPECT_EQ(p->policy.RouteAttach({1}, false).kind, Route::kAnswer);
  p->lifecycle.Abort(AbortCause::kCancelled, "cancelled", std::nullopt, false);
  MembershipPolicy::AttachRoute r = p->policy.RouteAttach({1}, false);
  EXPECT_EQ(r.kind, Route::kRefuse);
  EXPECT_EQ(r.refusal.message(), "job 'j' is aborted (cancelled); it takes no new ranks");
}

TEST(MembershipPolicyTest, RanksThatLeftAttachToTheNextIncarnation) {
  auto p = Make(2, FormsAgain());
  EXPECT_EQ(p->policy.RouteAttach({0}, false).kind, Route::kAnswer) << "rank 0 is still in";
  EXPECT_EQ(p->policy.RouteAttach({0}, /*again=*/true).kind, Route::kNextIncarnation);
  p->roster.Depart(0);
  EXPECT_EQ(p->policy.RouteAttach({0}, false).kind, Route::kNextIncarnation);
  p->lifecycle.Abort(AbortCause::kCancelled, "cancelled", std::nullopt, false);
  MembershipPolicy::AttachRoute r = p->policy.RouteAttach({0}, false);
  EXPECT_EQ(r.kind, Route::kRefuse);
  EXPECT_EQ(r.refusal.message(), "job 'j' was aborted (cancelled); it does not form again");
}

TEST(MembershipPolicyTest, NodesTakeBlocksUntilAnElasticJobRunsThenJoinUpToItsMaximum) {
  auto plain = Make(2);
  EXPECT_TRUE(plain->policy.TakesBlocks());
  EXPECT_EQ(plain->policy.CheckNode(0).code(), absl::StatusCode::kInvalidArgument);
  JobOptions options = Elastic(1);
  options.max_size = 4;
  auto p = Make(2, std::move(options), /*run=*/false);
  EXPECT_TRUE(p->policy.TakesBlocks());
  p->Run();
  EXPECT_FALSE(p->policy.TakesBlocks());
  EXPECT_TRUE(p->policy.CheckJoin(1, 1).ok());
  absl::Status full = p->policy.CheckJoin(2, 1);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            "job 'j' has 2 ranks and 1 joining; 2 more would exceed its maximum of 4");
  p->lifecycle.Detach("restarting");
  EXPECT_EQ(p->policy.CheckNode(1).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace troika::coordinator
