// A job that is not elastic forms anew when its ranks shut down and attach again
// (coordinator/job/membership_policy.h, docs/protocol.md "Shutting down and attaching again"): a
// fresh incarnation, which runs once every rank attached again; ranks that left and then
// exited or failed end it at once, naming the rank.

#include <future>
#include <memory>
#include <optional>

#include "coordinator/job/job.h"
#include "coordinator/job/job_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/job/job_test_util.h"

namespace troika::coordinator {
namespace {

using test_util::AttachAll;
using test_util::FakeSink;
using ::testing::HasSubstr;

// An attach's answer, once it comes.
struct Answer {
  std::shared_ptr<std::optional<absl::StatusOr<std::vector<Membership>>>> value =
      std::make_shared<std::optional<absl::StatusOr<std::vector<Membership>>>>();
  Job::AttachCallback callback() {
    return [value = value](absl::StatusOr<std::vector<Membership>> m) { *value = std::move(m); };
  }
  bool came() const { return value->has_value(); }
  const absl::StatusOr<std::vector<Membership>>& get() const { return **value; }
};

class JobIncarnationTest : public test_util::RegistryFixture {
 protected:
  // Rank r attaches on host "h<r>" (as the coordinator's service does: to the job in force).
  Answer AttachAgain(int rank, bool again = false, absl::Duration timeout = absl::Seconds(30)) {
    Answer answer;
    Find()->Attach({rank}, absl::StrCat("h", rank), timeout, answer.callback(), again);
    return answer;
  }
};

TEST_F(JobIncarnationTest, RanksThatShutDownAndAttachAgainFormAFreshIncarnation) {
  std::shared_ptr<Job> job = Create(2);
  AttachAll(*job, {"h0", "h1"});
  FakeSink s0, s1;
  ASSERT_TRUE(job->OpenSession({0}, 1, &s0).ok());
  ASSERT_TRUE(job->OpenSession({1}, 1, &s1).ok());
  job->kv().Set("data/1/rank0", "old address");
  ASSERT_TRUE(job->Submit(&s0, {Allreduce(0, "only.rank.0")}).ok());  // pending at shutdown
  ASSERT_TRUE(job->Goodbye(&s0, {0}).ok());
  ASSERT_TRUE(job->Goodbye(&s1, {1}).ok());
  EXPECT_EQ(job->state(), Job::State::kFinished);

  Answer a0 = AttachAgain(0), a1 = AttachAgain(1);
  ASSERT_TRUE(a0.came() && a1.came());
  ASSERT_TRUE(a0.get().ok()) << a0.get().status();
  ASSERT_TRUE(a1.get().ok()) << a1.get().status();
  const Membership& m = a1.get()->front();
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.size, 2);
  EXPECT_EQ(m.epoch, 2) << "the next incarnation";

  std::shared_ptr<Job> next = Find();
  ASSERT_NE(next, job);
  EXPECT_EQ(job->successor(), next);
  EXPECT_EQ(next->state(), Job::State::kRunning);
  EXPECT_EQ(next->epoch(), 2);
  EXPECT_TRUE(next->Describe().pending.empty()) << "nothing pending from before";
  std::optional<absl::StatusOr<std::string>> old_key;
  next->kv().Get("data/1/rank0", absl::ZeroDuration(),
                 [&old_key](absl::StatusOr<std::string> v) { old_key = std::move(v); });
  ASSERT_TRUE(old_key.has_value());
  EXPECT_FALSE(old_key->ok()) << "a fresh key-value store";

  // It negotiates afresh: the name pending before is a new tensor here.
  FakeSink n0, n1;
  ASSERT_TRUE(next->OpenSession({0}, 2, &n0).ok());
  ASSERT_TRUE(next->OpenSession({1}, 2, &n1).ok());
  ASSERT_TRUE(next->Submit(&n0, {Allreduce(0, "only.rank.0")}).ok());
  ASSERT_TRUE(next->Submit(&n1, {Allreduce(1, "only.rank.0")}).ok());
  std::vector<DownMessage> got = n1.messages();
  ASSERT_FALSE(got.empty());
  ASSERT_FALSE(got.back().responses.empty());
  EXPECT_FALSE(got.back().responses[0].is_error());
  // A session of the ended incarnation cannot join this one.
  FakeSink stale;
  EXPECT_FALSE(next->OpenSession({0}, 1, &stale).ok());
}

TEST_F(JobIncarnationTest, ARankAttachingAgainWaitsForTheOthersStillInTheOldIncarnation) {
  std::shared_ptr<Job> job = Create(2);
  AttachAll(*job, {"h0", "h1"});
  FakeSink s0, s1;
  ASSERT_TRUE(job->OpenSession({0}, 1, &s0).ok());
  ASSERT_TRUE(job->OpenSession({1}, 1, &s1).ok());
  ASSERT_TRUE(job->Goodbye(&s0, {0}).ok());
  Answer a0 = AttachAgain(0);
  EXPECT_FALSE(a0.came()) << "rank 1 is still in the job";
  // Rank 1 still runs in the old incarnation, whose name (and key-value store) it keeps.
  EXPECT_EQ(Find(), job);
  EXPECT_EQ(job->successor(), nullptr);
  ASSERT_TRUE(job->Goodbye(&s1, {1}).ok());
  EXPECT_NE(Find(), job) << "finished: the next incarnation serves the name";
  Answer a1 = AttachAgain(1);
  ASSERT_TRUE(a0.came() && a1.came());
  EXPECT_TRUE(a0.get().ok()) << a0.get().status();
  EXPECT_EQ(a0.get()->front().epoch, 2);
}

TEST_F(JobIncarnationTest, AnAgentsAttachAgainFormsTheNextIncarnationBeforeItsGoodbyeArrives) {
  // An agent's goodbyes travel on its session, its attach on another call: it says `again`.
  std::shared_ptr<Job> job = Create(2);
  AttachAll(*job, {"h0", "h1"});
  Answer a0 = AttachAgain(0, /*again=*/true);
  Answer a1 = AttachAgain(1, /*again=*/true);
  ASSERT_TRUE(a0.came() && a1.came());
  ASSERT_TRUE(a1.get().ok()) << a1.get().status();
  EXPECT_EQ(a1.get()->front().epoch, 2);
  // Without it, a rank that has not left learns its membership again (a repeated attach).
  std::shared_ptr<Job> next = Find();
  Answer repeated;
  next->Attach({0}, "h0", absl::Seconds(30), repeated.callback());
  ASSERT_TRUE(repeated.came());
  EXPECT_EQ(repeated.get()->front().epoch, 2);
}

TEST_F(JobIncarnationTest, ARankThatLeftAndExitedFailsTheRanksAttachingAgainNamingIt) {
  std::shared_ptr<Job> job = Create(3);
  AttachAll(*job, {"h0", "h1", "h2"});
  FakeSink s;
  ASSERT_TRUE(job->OpenSession({0, 1, 2}, 1, &s).ok());
  ASSERT_TRUE(job->Goodbye(&s, {0, 1, 2}).ok());
  Answer a0 = AttachAgain(0);
  EXPECT_FALSE(a0.came());
  ASSERT_TRUE(job->ReportExit(&s, {2, "h2", 0, 0}).ok());
  ASSERT_TRUE(a0.came());
  EXPECT_EQ(a0.get().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(a0.get().status().message(),
              HasSubstr("job 'train' aborted: rank 2 on h2 exited with code 0 after it shut "
                        "down, without attaching again"));
  // Exiting 0 once every rank had left is no failure of the ended incarnation.
  EXPECT_EQ(job->state(), Job::State::kFinished);
  EXPECT_TRUE(s.messages().empty()) << "its session is not told";
  Answer a1;  // (asked of the ended one: the registry may have let the aborted one go)
  job->Attach({1}, "h1", absl::Seconds(30), a1.callback());
  ASSERT_TRUE(a1.came());
  EXPECT_THAT(a1.get().status().message(), HasSubstr("rank 2 on h2 exited with code 0"));
}

TEST_F(JobIncarnationTest, AnExitBeforeAnyRankAttachedAgainFailsTheFirstThatDoes) {
  std::shared_ptr<Job> job = Create(2);
  AttachAll(*job, {"h0", "h1"});
  FakeSink s;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &s).ok());
  ASSERT_TRUE(job->Goodbye(&s, {0, 1}).ok());
  ASSERT_TRUE(job->ReportExit(&s, {1, "h1", 0, 0}).ok());  // the job's normal end, so far
  EXPECT_EQ(job->state(), Job::State::kFinished);
  Answer a0 = AttachAgain(0);
  ASSERT_TRUE(a0.came());
  EXPECT_THAT(a0.get().status().message(),
              HasSubstr("rank 1 on h1 exited with code 0 after it shut down"));
}

TEST_F(JobIncarnationTest, AFailureAfterAShutdownAbortsTheJobWithItsCauseEvenFinished) {
  std::shared_ptr<Job> job = Create(2);
  AttachAll(*job, {"h0", "h1"});
  FakeSink s;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &s).ok());
  ASSERT_TRUE(job->Goodbye(&s, {0, 1}).ok());
  Answer a0 = AttachAgain(0);
  ASSERT_TRUE(job->ReportExit(&s, {1, "h1", 3, 0}).ok());
  ASSERT_TRUE(a0.came());
  EXPECT_THAT(a0.get().status().message(),
              HasSubstr("aborted: rank 1 on h1 exited with code 3 after it shut down"));
  // The agents, still on the ended incarnation's session, learn it with the exit (their code).
  EXPECT_EQ(job->state(), Job::State::kAborted);
  ASSERT_EQ(s.messages().size(), 1u);
  const DownMessage down = s.messages()[0];
  EXPECT_THAT(down.abort_reason,
              HasSubstr("job 'train' aborted: rank 1 on h1 exited with code 3 after it shut down"));
  ASSERT_TRUE(down.abort_cause.has_value());
  EXPECT_EQ(down.abort_cause->ShellCode(), 3);
  // Nothing forms again. (The registry may have let the aborted incarnation go: asked of
  // the ended one.)
  Answer a1;
  job->Attach({1}, "h1", absl::Seconds(30), a1.callback());
  ASSERT_TRUE(a1.came());
  EXPECT_THAT(a1.get().status().message(),
              HasSubstr("was aborted (rank 1 on h1 exited with code 3 after it shut down); it "
                        "does not form again"));
}

TEST_F(JobIncarnationTest, ARankThatNeverAttachesAgainFailsTheOthersAtTheAttachTimeout) {
  std::shared_ptr<Job> job = Create(2);
  AttachAll(*job, {"h0", "h1"});
  FakeSink s;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &s).ok());
  ASSERT_TRUE(job->Goodbye(&s, {0, 1}).ok());
  std::promise<absl::Status> failed;
  Find()->Attach(
      {0}, "h0", absl::Milliseconds(50),
      [&failed](absl::StatusOr<std::vector<Membership>> m) { failed.set_value(m.status()); });
  const absl::Status status = failed.get_future().get();  // the scheduler's timer, real time
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              HasSubstr("rank 1 did not attach within 50ms (attached: rank 0); after a shutdown "
                        "the job forms again only once every rank attached again"));
}

TEST_F(JobIncarnationTest, AnElasticJobDoesNotFormAnew) {
  std::shared_ptr<Job> job = Create(2, /*min_size=*/1);
  AttachAll(*job, {"h0", "h1"});
  FakeSink s;
  ASSERT_TRUE(job->OpenSession({0, 1}, 1, &s).ok());
  ASSERT_TRUE(job->Goodbye(&s, {0, 1}).ok());
  Answer a0 = AttachAgain(0, /*again=*/true);
  ASSERT_TRUE(a0.came());
  EXPECT_THAT(a0.get().status().message(), HasSubstr("is finished; it takes no new ranks"));
  EXPECT_EQ(job->successor(), nullptr);
}

TEST_F(JobIncarnationTest, ALineageKeepsTheJobInForceButNotTheOnesBefore) {
  std::shared_ptr<Job> first = Create(2);
  auto lineage = std::make_shared<JobLineage>(first);
  first->Track(lineage);
  std::weak_ptr<Job> gone = first;
  AttachAll(*first, {"h0", "h1"});
  first.reset();
  for (int round = 0; round < 3; ++round) {
    std::shared_ptr<Job> job = Find();
    FakeSink s;
    ASSERT_TRUE(job->OpenSession({0, 1}, job->epoch(), &s).ok());
    ASSERT_TRUE(job->Goodbye(&s, {0, 1}).ok());
    Answer a0 = AttachAgain(0), a1 = AttachAgain(1);
    ASSERT_TRUE(a1.came() && a1.get().ok());
    job->CloseSession(&s, absl::OkStatus());
  }
  std::shared_ptr<Job> in_force = JobRegistry::Latest(lineage->anchor());
  EXPECT_EQ(in_force->epoch(), 4);
  EXPECT_EQ(in_force, Find());
  bool created = true;
  ASSERT_TRUE(registry_.CreateJob("train", 2, &created).ok());  // the registry moves on too
  EXPECT_FALSE(created);
  EXPECT_TRUE(gone.expired()) << "the first incarnation was let go";
}

}  // namespace
}  // namespace troika::coordinator
